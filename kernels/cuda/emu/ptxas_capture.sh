#!/bin/sh
# The CUDA compiler launcher of mhecuda (cuda.cmake): runs the nvcc command it is given with
# ptxas -v added and keeps ptxas's per-kernel lines next to the object (OBJECT.ptxas), from which
# ptxas_table.sh makes the emulation's table of registers and static shared memory.  nvcc's
# other output (warnings, errors) still reaches stderr; with -DMHE_CUDA_PTXAS_VERBOSE=ON all of it.
out=
prev=
verbose=
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  [ "$a" = "-Xptxas=-v" ] && verbose=1
  prev=$a
done
[ -n "$out" ] || exec "$@"
"$@" -Xptxas=-v 2>"$out.ptxas.tmp"
rc=$?
if [ -n "$verbose" ]; then
  cat "$out.ptxas.tmp" >&2
else
  grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$out.ptxas.tmp" >&2
fi
mv "$out.ptxas.tmp" "$out.ptxas"
exit $rc
