// Compiled once per ISA level (cpu_isa.h): installs that level's copy of every element op.
#include "kernels/cpu/cpu_internal.h"

void cpu_install_ops(Backend *be) {
    cpu_install_linear(be);
    cpu_install_elementwise(be);
    cpu_install_layernorm(be);
    cpu_install_activation(be);
    cpu_install_embedding(be);
    cpu_install_loss(be);
    cpu_install_attention(be);
    cpu_install_reduce(be);
    cpu_install_optim(be);
}
