// Loads eBPF: a socket filter program and a map (the verifier has a long CVE history; an
// escape primitive when it lets untrusted code read or write kernel memory).
// Blocked by: seccomp refuses bpf(2) (EPERM); no CAP_BPF/CAP_SYS_ADMIN besides.
// space-attack: sandbox=shared
#include <linux/bpf.h>

#include "../attack.h"

int main(void) {
  struct bpf_insn prog[] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
      {.code = BPF_JMP | BPF_EXIT},
  };
  char log[256];
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  attr.insns = (uint64_t)(uintptr_t)prog;
  attr.insn_cnt = 2;
  attr.license = (uint64_t)(uintptr_t) "GPL";
  attr.log_buf = (uint64_t)(uintptr_t)log;
  attr.log_size = sizeof log;
  attr.log_level = 1;
  refused("bpf(BPF_PROG_LOAD socket filter)", syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr),
          EPERM, 0);
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 8;
  attr.max_entries = 1;
  refused("bpf(BPF_MAP_CREATE)", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr), EPERM, 0);
  finish();
}
