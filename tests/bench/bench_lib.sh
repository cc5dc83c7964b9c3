# What bench_vs_torch.sh and bf16_storage.sh share (sourced; POSIX sh).
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
# The median of the numbers on stdin, one a line ("nan" when there are none).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
