#!/bin/sh
# ptxas_table.sh OUT OBJECT...: the emulation's launch-limit table (cuda_emu_launch.cpp) from the
# ptxas -v lines ptxas_capture.sh kept for each object of mhecuda: one C++ initialiser per kernel
# and architecture, {"mangled name", sm, registers per thread, static shared bytes}.
out=$1
shift
# The ASan and TSan emulation libraries both list the table, so a parallel build can run this
# twice at once: each run writes its own temporary file and renames it into place (same content,
# atomic), where a shared one let a run see the other's half-written or already-renamed file.
tmp="$out.tmp.$$"
for o in "$@"; do
  if [ ! -f "$o.ptxas" ]; then
    echo "ptxas_table.sh: $o.ptxas is missing (mhecuda built without kernels/cuda/emu/ptxas_capture.sh?)" >&2
    exit 1
  fi
  cat "$o.ptxas"
done | awk '
  /Compiling entry function/ {
    split($0, q, "\047"); name = q[2]; arch = q[4]; sub("sm_", "", arch); next
  }
  /Compiling/ { name = ""; next }
  /Used [0-9]+ registers/ && name != "" {
    regs = 0; smem = 0
    for (i = 1; i <= NF; i++) {
      if ($(i + 1) ~ /^registers/) regs = $i
      if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i
    }
    printf "{\"%s\", %s, %s, %s},\n", name, arch, regs, smem
    name = ""
  }' > "$tmp" || { rm -f "$tmp"; exit 1; }
[ -s "$tmp" ] || { rm -f "$tmp"; echo "ptxas_table.sh: no kernels found" >&2; exit 1; }
mv "$tmp" "$out"
