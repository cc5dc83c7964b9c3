#!/usr/bin/env bash
# The GPU bundle (tests/gpu/bundle.sh) on a bare machine, proven here without a GPU: a minimal root
# holding only the C library, bash, the few tools check.sh calls and the CUDA toolkit's
# cuBLAS/cuBLASLt/NCCL where a GPU image keeps them (none of our Debian packages: no Open MPI,
# libyaml, oneDNN, cJSON), entered with chroot.  There:
#   - check.sh says in one line that there is no GPU and exits non-zero;
#   - the bundled mhetrain starts, reports its backends, and trains 4 steps on the bundled corpus
#     on the CPU, through the bundled Open MPI as a singleton, writing a checkpoint;
#   - without the toolkit's cuBLAS/NCCL there, `info` says so in one line and the CPU still trains;
#   - the bundled compare.sh (check.sh's compare group) trains and scores one type on the CPU;
#   - the archive is at most 48 MiB, and unpacks with xz or, where xz is missing, Python's lzma.
set -euo pipefail
: "${MHE_SOURCE_DIR:?}" "${MHE_BUILD_DIR:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir gpu-bundle
[ "$(id -u)" = 0 ] || { echo "SKIP: chroot needs root"; exit 77; }
MHE_BUNDLE_NO_BUILD=1 MHE_BUILD_DIR="$MHE_BUILD_DIR" bash "$MHE_SOURCE_DIR/tests/gpu/bundle.sh" "$WORK/mhegpu.tar.xz" ||
  fail "bundle.sh"

root="$WORK/root"
mkdir -p "$root/usr/bin" "$root/tmp" "$root/work" "$root/usr/local/cuda/lib64"
chmod 1777 "$root/tmp"
mkdir -p "$root/dev"
mknod -m 666 "$root/dev/null" c 1 3 || { echo "SKIP: cannot make /dev/null in the minimal root (mknod)"; exit 77; }
ln -s usr/bin "$root/bin"
# The tools and every library they load, at the same paths.
tools=(bash sh tar gzip xz mktemp date awk timeout realpath cat grep wc mkdir dirname env head tail tee ls rm sed cut tr
       basename)
for t in "${tools[@]}"; do
  p="$(command -v "$t")"
  cp -L "$p" "$root/usr/bin/$t"
  ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u >"$WORK/libs.txt"
# The C library family a GPU image always has (bundle.sh leaves it out).
for l in libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libresolv.so.2 libutil.so.1; do
  readlink -f "/lib/x86_64-linux-gnu/$l" >/dev/null && echo "/lib/x86_64-linux-gnu/$l"
done >>"$WORK/libs.txt"
sort -u "$WORK/libs.txt" | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  [ -e "$root$lib" ] || cp -L "$lib" "$root$lib"
done
# The toolkit's libraries the bundle leaves out (a hard link: no copy of 800 MB).
for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  src="$(readlink -f /usr/local/cuda/lib64/$lib)"
  ln "$src" "$root/usr/local/cuda/lib64/$lib" 2>/dev/null || cp "$src" "$root/usr/local/cuda/lib64/$lib"
done
cp "$WORK/mhegpu.tar.xz" "$root/work/"
tar -xJf "$WORK/mhegpu.tar.xz" -C "$root/work"
# check.sh's fallback where xz is missing: Python's lzma reads the same members.
python3 -c 'import sys, tarfile; print("\n".join(sorted(m.name for m in tarfile.open(sys.argv[1]))))' "$WORK/mhegpu.tar.xz" >"$WORK/py.txt" ||
  fail "Python's tarfile cannot read the bundle"
tar -tJf "$WORK/mhegpu.tar.xz" | sed 's,/$,,' | sort >"$WORK/tar.txt"
cmp -s "$WORK/py.txt" "$WORK/tar.txt" || fail "Python's tarfile and tar list different members"
for pkg in libyaml-0-2 libcjson1 libdnnl2 libopenmpi3; do
  ! ls "$root"/usr/lib/x86_64-linux-gnu/${pkg%%[0-9]*}*.so* >/dev/null 2>&1 || fail "the minimal root holds $pkg"
done

# 1. No GPU: one line, non-zero.
set +e
chroot "$root" /usr/bin/bash /work/mhegpu/tests/check.sh /work/mhegpu.tar.xz /work/out >"$WORK/check.txt" 2>&1
rc=$?
set -e
cat "$WORK/check.txt"
[ $rc -ne 0 ] || fail "check.sh exited 0 without a GPU"
[ "$(wc -l <"$WORK/check.txt")" -eq 1 ] || fail "check.sh said more than one line without a GPU"
grep -q "no NVIDIA GPU" "$WORK/check.txt" || fail "check.sh did not say there is no GPU"

# 2. The bundled programs run there, on the CPU.
B=/work/mhegpu
env_vars=(LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64 OPAL_PREFIX=$B/openmpi
  OMPI_MCA_mca_base_component_path=$B/openmpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
  PMIX_MCA_mca_base_component_path=$B/pmix OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader
  OMPI_MCA_pml=ob1 OMP_NUM_THREADS=2 HOME=/tmp TMPDIR=/tmp)
chroot "$root" /usr/bin/env "${env_vars[@]}" $B/bin/mhetrain info >"$WORK/info.txt" 2>&1 ||
  { cat "$WORK/info.txt"; fail "bundled mhetrain info"; }
grep -q "backends: cpu cuda" "$WORK/info.txt" || { cat "$WORK/info.txt"; fail "info: no cuda backend"; }
chroot "$root" /usr/bin/env "${env_vars[@]}" /usr/bin/bash -c "cd $B && bin/mhetrain train configs/quickstart.yaml \
  runtime.device=cpu runtime.threads=2 data.train=[corpus/shards/train] data.valid=[corpus/shards/valid] \
  data.tokenizer=corpus/vocab.txt data.tokenizer_kind=wordpiece model.vocab_size=30522 model.layers=1 \
  train.micro_batch=4 train.global_batch=4 data.seq_len=64 train.steps=4 train.log_every=2 train.eval_every=0 \
  train.out_dir=/tmp/train-out" >"$WORK/train.txt" 2>&1 || { cat "$WORK/train.txt"; fail "bundled mhetrain train"; }
grep -q "^step 4/4" "$WORK/train.txt" || { cat "$WORK/train.txt"; fail "no step 4"; }
[ -d "$root/tmp/train-out/checkpoints/step_00000004" ] || fail "no checkpoint written"
grep -q "^nccl: [0-9]" "$WORK/info.txt" || { cat "$WORK/info.txt"; fail "info: NCCL not loaded with the toolkit's libraries there"; }

# 3. Without cuBLAS, cuBLASLt and NCCL (kernels/cuda/cuda_libs.cpp opens them at run time): info
#    says so in one line, and the CPU still trains; the libraries are not mapped by a CPU run.
mv "$root/usr/local/cuda/lib64" "$root/usr/local/cuda/lib64.away"
chroot "$root" /usr/bin/env "${env_vars[@]}" $B/bin/mhetrain info >"$WORK/info2.txt" 2>&1 ||
  { cat "$WORK/info2.txt"; fail "mhetrain info without the CUDA libraries"; }
grep -q "^cublas, cublasLt, nccl: not loaded (libcublas.so.[0-9]*: cannot open shared object file" "$WORK/info2.txt" ||
  { cat "$WORK/info2.txt"; fail "info did not say the CUDA libraries are missing"; }
chroot "$root" /usr/bin/env "${env_vars[@]}" /usr/bin/bash -c "cd $B && bin/mhetrain train configs/quickstart.yaml \
  runtime.device=cpu runtime.threads=2 data.train=[corpus/shards/train] data.valid=[corpus/shards/valid] \
  data.tokenizer=corpus/vocab.txt data.tokenizer_kind=wordpiece model.vocab_size=30522 model.layers=1 \
  train.micro_batch=4 train.global_batch=4 data.seq_len=64 train.steps=2 train.log_every=2 train.eval_every=0 \
  train.out_dir=/tmp/train-out2" >"$WORK/train2.txt" 2>&1 || { cat "$WORK/train2.txt"; fail "CPU training without the CUDA libraries"; }
grep -q "^step 2/2" "$WORK/train2.txt" || { cat "$WORK/train2.txt"; fail "no step 2 without the CUDA libraries"; }
mv "$root/usr/local/cuda/lib64.away" "$root/usr/local/cuda/lib64"

# 4. The compare group's script from the bundle, with its config and corpus, on the CPU (a tiny
#    model, one type, 2 s): the layout check.sh hands it on a GPU machine.
chroot "$root" /usr/bin/env "${env_vars[@]}" MHE_COMPARE_DEVICE=cpu MHE_COMPARE_SECONDS=2 MHE_COMPARE_VARIANTS=mhe_mul \
  /usr/bin/bash $B/tests/compare.sh $B/bin/mhetrain $B/configs/bert-small.yaml $B/corpus/compare /tmp/compare \
  model.layers=1 model.hidden=64 model.heads=4 model.ffn=128 data.seq_len=64 train.global_batch=8 \
  train.micro_batch=8 runtime.threads=2 >"$WORK/compare.txt" 2>&1 || { cat "$WORK/compare.txt"; fail "bundled compare.sh"; }
grep -qE "^compare-result: attention=mhe_mul params=[0-9]+ steps=[1-9]" "$WORK/compare.txt" ||
  { cat "$WORK/compare.txt"; fail "bundled compare.sh: no result line"; }

size=$(stat -c %s "$WORK/mhegpu.tar.xz")
echo "bundle: $((size / 1048576)) MiB; check.sh without a GPU: '$(cat "$WORK/check.txt")' (exit $rc); train: $(grep '^step 4/4' "$WORK/train.txt"); $(grep '^compare-result:' "$WORK/compare.txt")"
[ "$size" -le $((48 * 1024 * 1024)) ] || fail "bundle over 48 MiB"
