# The bench's model sizes, shared by bench_vs_torch.sh and bf16_storage.sh (sourced):
# bench_size NAME sets L (layers), D (hidden), n (heads), T (sequence), B (micro-batch) and V
# (vocabulary); an unknown NAME returns 1.
bench_size() {
  case "$1" in
    tiny) L=4 D=256 n=8 T=128 B=32 V=8192 ;;
    small) L=4 D=512 n=8 T=128 B=32 V=30522 ;;
    tiny512) L=4 D=256 n=8 T=512 B=8 V=8192 ;;
    *) return 1 ;;
  esac
}
