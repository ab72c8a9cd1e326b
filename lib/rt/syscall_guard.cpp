#include <rdmx/rt/syscall_guard.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>

#if defined(__x86_64__) && defined(__linux__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#define RDMX_STRICT_SUPPORTED 1
#else
#define RDMX_STRICT_SUPPORTED 0
#endif

#include <rdmx/rt/dpdk.hpp>

// The SIGSYS path runs while SIGSYS is blocked: a system call made there by anything but the
// gate would be trapped again and the kernel would kill the process without a word. Sanitizer
// instrumentation can make such calls (ASan's no-return stack check calls sigaltstack, TSan's
// runtime may mmap), so the handler and its helpers are not instrumented.
// (clang's no_sanitize("thread") still instruments function entry/exit, whose trace buffer TSan
// grows with mmap; disable_sanitizer_instrumentation removes everything.) The handler's counters
// are plain integers used through __atomic builtins: std::atomic's member functions are separate
// (instrumented) functions.
#if defined(__clang__) && __has_attribute(disable_sanitizer_instrumentation)
#define RDMX_SIGNAL_PATH __attribute__((disable_sanitizer_instrumentation))
#else
#define RDMX_SIGNAL_PATH __attribute__((no_sanitize("address", "thread", "undefined")))
#endif

namespace rdmx::rt {

const char* action_name(Action a) noexcept {
  switch (a) {
    case Action::kKill:
      return "kill";
    case Action::kRecord:
      return "record";
  }
  return "?";
}

RDMX_SIGNAL_PATH const char* syscall_name(long nr) noexcept {
#if RDMX_STRICT_SUPPORTED
  switch (nr) {
    case SYS_read:
      return "read";
    case SYS_write:
      return "write";
    case SYS_close:
      return "close";
    case SYS_poll:
      return "poll";
    case SYS_mmap:
      return "mmap";
    case SYS_mprotect:
      return "mprotect";
    case SYS_munmap:
      return "munmap";
    case SYS_brk:
      return "brk";
    case SYS_rt_sigaction:
      return "rt_sigaction";
    case SYS_rt_sigprocmask:
      return "rt_sigprocmask";
    case SYS_ioctl:
      return "ioctl";
    case SYS_sched_yield:
      return "sched_yield";
    case SYS_madvise:
      return "madvise";
    case SYS_nanosleep:
      return "nanosleep";
    case SYS_getpid:
      return "getpid";
    case SYS_clone:
      return "clone";
    case SYS_vfork:
      return "vfork";
    case SYS_execve:
      return "execve";
    case SYS_exit:
      return "exit";
    case SYS_gettid:
      return "gettid";
    case SYS_futex:
      return "futex";
    case SYS_clock_gettime:
      return "clock_gettime";
    case SYS_clock_nanosleep:
      return "clock_nanosleep";
    case SYS_exit_group:
      return "exit_group";
    case SYS_epoll_wait:
      return "epoll_wait";
    case SYS_tgkill:
      return "tgkill";
    case SYS_openat:
      return "openat";
    case SYS_getrandom:
      return "getrandom";
    case SYS_clone3:
      return "clone3";
    case SYS_gettimeofday:
      return "gettimeofday";
    case SYS_sched_getaffinity:
      return "sched_getaffinity";
    case SYS_getcpu:
      return "getcpu";
    default:
      return "";
  }
#else
  (void)nr;
  return "";
#endif
}

#if RDMX_STRICT_SUPPORTED

// The gate: the only `syscall` instruction the filter lets through (by its address). Arguments
// as the C ABI gives them (nr, a1..a6); returns the raw kernel result (-errno on failure).
extern "C" long rdmx_rt_syscall_gate(long nr, long a1, long a2, long a3, long a4, long a5,
                                     long a6) noexcept;
extern "C" const char rdmx_rt_syscall_gate_ret[];  // address after the syscall instruction

asm(R"(
  .pushsection .text
  .p2align 4
  .globl rdmx_rt_syscall_gate
  .hidden rdmx_rt_syscall_gate
  .type rdmx_rt_syscall_gate, @function
rdmx_rt_syscall_gate:
  .cfi_startproc
  movq %rdi, %rax
  movq %rsi, %rdi
  movq %rdx, %rsi
  movq %rcx, %rdx
  movq %r8, %r10
  movq %r9, %r8
  movq 8(%rsp), %r9
  syscall
  .globl rdmx_rt_syscall_gate_ret
  .hidden rdmx_rt_syscall_gate_ret
rdmx_rt_syscall_gate_ret:
  ret
  .cfi_endproc
  .size rdmx_rt_syscall_gate, .-rdmx_rt_syscall_gate

  .p2align 4
  .globl rdmx_rt_sigreturn_restorer
  .hidden rdmx_rt_sigreturn_restorer
  .type rdmx_rt_sigreturn_restorer, @function
rdmx_rt_sigreturn_restorer:
  movq $15, %rax
  syscall
  .size rdmx_rt_sigreturn_restorer, .-rdmx_rt_sigreturn_restorer
  .popsection
)");

// Where the SIGSYS handler returns to (rt_sigreturn, SYS_rt_sigreturn == 15 on x86-64). Ours, so
// the handler can be installed with a raw rt_sigaction (see install_handler()).
extern "C" void rdmx_rt_sigreturn_restorer() noexcept;
static_assert(SYS_rt_sigreturn == 15);

namespace {

constexpr int kSiCodeSeccomp = 1;  // SYS_SECCOMP of <asm-generic/siginfo.h> (not in glibc)

// Per-thread state. Read in the SIGSYS handler: plain (static TLS) data, no allocation.
struct ThreadStrict {
  bool installed = false;
  bool run_phase = false;
  Action action = Action::kKill;
  int lcore = -1;
};
thread_local ThreadStrict t_strict;

// Written by the SIGSYS handler, read by anyone: __atomic builtins only.
uint64_t g_violations = 0;
uint64_t g_forwarded = 0;
long g_first_nr = -1;
uint64_t g_first_ip = 0;
int g_first_lcore = -1;

RDMX_SIGNAL_PATH long gate(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                           long a6 = 0) noexcept {
  return rdmx_rt_syscall_gate(nr, a1, a2, a3, a4, a5, a6);
}

// Async-signal-safe message building (no malloc, no stdio).
struct Msg {
  char buf[256];
  size_t n = 0;
  RDMX_SIGNAL_PATH void str(const char* s) noexcept {
    while (*s && n < sizeof(buf) - 1) buf[n++] = *s++;
  }
  RDMX_SIGNAL_PATH void num(uint64_t v, unsigned base = 10) noexcept {
    char tmp[24];
    size_t k = 0;
    do {
      unsigned d = static_cast<unsigned>(v % base);
      tmp[k++] = static_cast<char>(d < 10 ? '0' + d : 'a' + d - 10);
      v /= base;
    } while (v != 0 && k < sizeof(tmp));
    if (base == 16) str("0x");
    while (k > 0 && n < sizeof(buf) - 1) buf[n++] = tmp[--k];
  }
  RDMX_SIGNAL_PATH void write_stderr() noexcept {
    gate(SYS_write, 2, reinterpret_cast<long>(buf), long(n));
  }
};

// Ends the process with SIGSYS. Deliberately not [[noreturn]]: sanitizers instrument calls to
// noreturn functions with a stack check that makes a system call (sigaltstack), which would
// trap again with SIGSYS blocked - and the kernel turns that into a silent kill.
RDMX_SIGNAL_PATH void die(const char* what, long nr, uint64_t ip) noexcept {
  Msg m;
  m.str("rdmx: strict mode: ");
  m.str(what);
  m.str(": system call ");
  m.num(static_cast<uint64_t>(nr));
  const char* name = syscall_name(nr);
  if (*name) {
    m.str(" (");
    m.str(name);
    m.str(")");
  }
  m.str(" on lcore ");
  if (t_strict.lcore >= 0) {
    m.num(static_cast<uint64_t>(t_strict.lcore));
  } else {
    m.str("none");
  }
  m.str(" at ");
  m.num(ip, 16);
  m.str("\n");
  m.write_stderr();
  // Default action for SIGSYS, send it to this thread and unblock it (it is blocked while this
  // handler runs): the kernel delivers it on the way out of rt_sigprocmask and the process ends
  // with "Bad system call".
  struct {
    void* handler;
    unsigned long flags;
    void* restorer;
    uint64_t mask;
  } dfl = {nullptr, 0, nullptr, 0};  // SIG_DFL
  gate(SYS_rt_sigaction, SIGSYS, reinterpret_cast<long>(&dfl), 0, 8);
  gate(SYS_tgkill, gate(SYS_getpid), gate(SYS_gettid), SIGSYS);
  const uint64_t sigsys_bit = 1ull << (SIGSYS - 1);
  gate(SYS_rt_sigprocmask, SIG_UNBLOCK, reinterpret_cast<long>(&sigsys_bit), 0, 8);
  // Not reached: the signal was delivered on the way out of rt_sigprocmask.
  gate(SYS_exit_group, 128 + SIGSYS);
}

// Emulates rt_sigprocmask on the interrupted context: a mask changed inside the handler would
// be overwritten by rt_sigreturn. SIGSYS is never blocked: the kernel turns a seccomp trap with
// SIGSYS blocked into a kill (glibc's pthread_create blocks all signals around clone).
RDMX_SIGNAL_PATH long emulate_sigprocmask(ucontext_t* uc, long how, const uint64_t* set,
                                          uint64_t* old, long size) noexcept {
  if (size != 8) return -EINVAL;
  // The first 64 signals (all Linux has) live in the first word of the sigset.
  uint64_t cur = uc->uc_sigmask.__val[0];
  if (old != nullptr) *old = cur;
  if (set != nullptr) {
    const uint64_t unblockable =
        (1ull << (SIGKILL - 1)) | (1ull << (SIGSTOP - 1)) | (1ull << (SIGSYS - 1));
    switch (how) {
      case SIG_BLOCK:
        cur |= *set;
        break;
      case SIG_UNBLOCK:
        cur &= ~*set;
        break;
      case SIG_SETMASK:
        cur = *set;
        break;
      default:
        return -EINVAL;
    }
    cur &= ~unblockable;
    uc->uc_sigmask.__val[0] = cur;
  }
  return 0;
}

RDMX_SIGNAL_PATH void on_sigsys(int, siginfo_t* si, void* ctx) {
  const int saved_errno = errno;
  auto* uc = static_cast<ucontext_t*>(ctx);
  greg_t* g = uc->uc_mcontext.gregs;
  const long nr = si->si_syscall;
  const uint64_t ip = reinterpret_cast<uint64_t>(si->si_call_addr);
  if (si->si_code != kSiCodeSeccomp || !t_strict.installed) {
    // Not ours (sent by kill(2), or on a thread without the filter): behave like the default.
    die("unexpected SIGSYS", nr, ip);
    return;
  }
  if (t_strict.run_phase) {
    if (__atomic_fetch_add(&g_violations, 1, __ATOMIC_RELAXED) == 0) {
      __atomic_store_n(&g_first_nr, nr, __ATOMIC_RELAXED);
      __atomic_store_n(&g_first_ip, ip, __ATOMIC_RELAXED);
      __atomic_store_n(&g_first_lcore, t_strict.lcore, __ATOMIC_RELAXED);
    }
    if (t_strict.action == Action::kKill) {
      die("system call in the run phase", nr, ip);
      return;
    }
  } else {
    __atomic_fetch_add(&g_forwarded, 1, __ATOMIC_RELAXED);
  }
  long ret;
  switch (nr) {
    case SYS_rt_sigprocmask:
      ret = emulate_sigprocmask(uc, g[REG_RDI], reinterpret_cast<const uint64_t*>(g[REG_RSI]),
                                reinterpret_cast<uint64_t*>(g[REG_RDX]), g[REG_R10]);
      break;
    case SYS_clone3:
      ret = -ENOSYS;  // glibc falls back to clone(2), which we can judge below
      break;
    case SYS_clone:
      if (g[REG_RSI] != 0) {
        die("thread creation after strict mode is not supported", nr, ip);
        return;
      }
      ret = gate(nr, g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]);
      break;
    case SYS_vfork:
    case SYS_execve:
    case SYS_execveat:
      die("vfork/exec after strict mode is not supported", nr, ip);
      return;
    default:
      ret = gate(nr, g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]);
      break;
  }
  g[REG_RAX] = ret;
  errno = saved_errno;
}

std::once_flag g_handler_once;
int g_handler_rc = 0;

// The kernel's struct sigaction for rt_sigaction(2) on x86-64.
struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};
constexpr unsigned long kSaRestorer = 0x04000000;  // SA_RESTORER (not exported by glibc)

// Installed with a raw rt_sigaction, not sigaction(3): sanitizer runtimes intercept sigaction
// and run their own wrapper first, which may make system calls (TSan allocates its per-thread
// signal state with mmap on the first signal) - fatal with SIGSYS blocked. Without the wrapper
// the kernel calls on_sigsys directly. Every other signal is blocked while it runs.
void install_handler() {
  KernelSigaction ka{};
  ka.handler = reinterpret_cast<void*>(&on_sigsys);
  ka.flags = SA_SIGINFO | kSaRestorer;
  ka.restorer = &rdmx_rt_sigreturn_restorer;
  ka.mask = ~0ull;
  g_handler_rc = syscall(SYS_rt_sigaction, SIGSYS, &ka, nullptr, sizeof(ka.mask)) == 0 ? 0 : errno;
}

}  // namespace

Status enter_strict_mode(Action action) {
  if (t_strict.installed) {
    t_strict.action = action;
    t_strict.run_phase = true;
    return {};
  }
  std::call_once(g_handler_once, install_handler);
  if (g_handler_rc != 0) {
    return make_error(Errc::kDeviceError, std::string("strict mode: sigaction(SIGSYS): ") +
                                              std::strerror(g_handler_rc));
  }
  const uint64_t gate_ip = reinterpret_cast<uint64_t>(&rdmx_rt_syscall_gate_ret[0]);
  const uint32_t gate_lo = static_cast<uint32_t>(gate_ip);
  const uint32_t gate_hi = static_cast<uint32_t>(gate_ip >> 32);
  constexpr uint32_t kArch = offsetof(struct seccomp_data, arch);
  constexpr uint32_t kNr = offsetof(struct seccomp_data, nr);
  constexpr uint32_t kIpLo = offsetof(struct seccomp_data, instruction_pointer);
  constexpr uint32_t kIpHi = kIpLo + 4;  // little-endian
  // clang-format off
  struct sock_filter prog[] = {
    /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArch),
    /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 8),   // else -> kill
    /* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kNr),
    /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigreturn, 5, 0),    // -> allow
    /* 4 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kIpLo),
    /* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, gate_lo, 0, 2),             // else -> trap
    /* 6 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kIpHi),
    /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, gate_hi, 1, 0),             // -> allow
    /* 8 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
    /* 9 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 10 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
  };
  // clang-format on
  struct sock_fprog fprog = {static_cast<unsigned short>(sizeof(prog) / sizeof(prog[0])), prog};

  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return make_error(Errc::kDeviceError, std::string("strict mode: prctl(PR_SET_NO_NEW_PRIVS): ") +
                                              std::strerror(errno));
  }
  const unsigned lcore = rte_lcore_id();
  t_strict.lcore = lcore == LCORE_ID_ANY ? -1 : static_cast<int>(lcore);
  t_strict.action = action;
  // No SECCOMP_FILTER_FLAG_TSYNC: the filter applies to this thread only.
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) {
    return make_error(Errc::kDeviceError, std::string("strict mode: seccomp(SET_MODE_FILTER): ") +
                                              std::strerror(errno));
  }
  t_strict.installed = true;
  t_strict.run_phase = true;
  return {};
}

void leave_strict_mode() noexcept {
  t_strict.run_phase = false;
}
bool strict_mode_installed() noexcept {
  return t_strict.installed;
}
bool in_strict_run_phase() noexcept {
  return t_strict.installed && t_strict.run_phase;
}
uint64_t strict_violations() noexcept {
  return __atomic_load_n(&g_violations, __ATOMIC_RELAXED);
}
uint64_t strict_forwarded_calls() noexcept {
  return __atomic_load_n(&g_forwarded, __ATOMIC_RELAXED);
}
StrictViolation first_strict_violation() noexcept {
  StrictViolation v;
  if (strict_violations() == 0) return v;
  v.nr = __atomic_load_n(&g_first_nr, __ATOMIC_RELAXED);
  v.ip = __atomic_load_n(&g_first_ip, __ATOMIC_RELAXED);
  v.lcore = __atomic_load_n(&g_first_lcore, __ATOMIC_RELAXED);
  v.name = syscall_name(v.nr);
  return v;
}

#else  // !RDMX_STRICT_SUPPORTED

Status enter_strict_mode(Action) {
  return make_error(Errc::kUnsupported, "strict mode needs x86-64 Linux (seccomp)");
}
void leave_strict_mode() noexcept {}
bool strict_mode_installed() noexcept {
  return false;
}
bool in_strict_run_phase() noexcept {
  return false;
}
uint64_t strict_violations() noexcept {
  return 0;
}
uint64_t strict_forwarded_calls() noexcept {
  return 0;
}
StrictViolation first_strict_violation() noexcept {
  return {};
}

#endif

}  // namespace rdmx::rt
