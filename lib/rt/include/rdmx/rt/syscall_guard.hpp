// Strict mode: the kernel proves that a poll thread's run phase makes no system call.
//
// enter_strict_mode() installs a seccomp BPF filter on the CALLING thread only (no
// SECCOMP_FILTER_FLAG_TSYNC: other threads - main, emu device thread, log drainer, telemetry -
// are not affected). From then on the filter lets through exactly:
//   - system calls issued from the runtime's own "gate" (one `syscall` instruction in
//     syscall_guard.cpp, recognised by its instruction pointer), which only the SIGSYS handler
//     below uses;
//   - rt_sigreturn, which is how any signal handler returns (it is the end of a signal
//     delivery, not a call the poll loop makes);
// and turns every other system call into SIGSYS (SECCOMP_RET_TRAP). A call under a foreign
// architecture/ABI (anything but AUDIT_ARCH_X86_64) kills the process (SECCOMP_RET_KILL_PROCESS).
//
// Why TRAP and not KILL in the filter: a seccomp filter cannot be removed, and in DPDK 22.11 an
// lcore whose function returns goes straight back to a blocking read() on its command pipe. A
// KILL filter would therefore kill the process at the first clean shutdown. With TRAP, the
// runtime's SIGSYS handler decides: during the run phase the call is a violation (Action below);
// after leave_strict_mode() the handler performs the call through the gate and returns its
// result, so teardown and the EAL's wait loop keep working (slowly - one signal per call).
//
// Not system calls, hence allowed without asking anything: rte_rdtsc() (an instruction), atomic
// operations, page faults on already-mapped memory, and clock_gettime()/gettimeofday() served by
// the vDSO (a clock source without vDSO support, e.g. some VMs, turns them into real system calls
// and strict mode will report them - that is intended).
//
// Limits after leave_strict_mode() (the thread keeps the filter forever): it must not create
// threads (clone with a new stack), vfork, or exec - the handler reports these and kills the
// process. rt_sigprocmask is emulated on the interrupted context's mask. The SIGSYS handler is
// process-wide: rdmx owns SIGSYS.
//
// x86-64 Linux only; elsewhere enter_strict_mode() returns Errc::kUnsupported.
#pragma once

#include <cstdint>

#include <rdmx/core/result.hpp>

namespace rdmx::rt {

enum class Action : uint8_t {
  // First run-phase system call: print one line naming the call, the lcore and the address, then
  // end the process with SIGSYS ("Bad system call"). A test sees WIFSIGNALED && WTERMSIG==SIGSYS.
  kKill,
  // Count the call, remember the first one, perform it through the gate and continue. The run
  // then fails by checking strict_violations() (e.g. Launcher::wait does).
  kRecord,
};

const char* action_name(Action a) noexcept;

// Setup path -> run phase. Installs the filter on the calling thread the first time (later calls
// on the same thread only re-arm it) and marks the thread as in its run phase. Call it from the
// thread that polls, after its setup (allocation, logging, verbs calls) is done. Fails when
// prctl/seccomp are refused (message says why) or on a non-x86-64 build.
Status enter_strict_mode(Action action);

// Run phase -> teardown. The thread keeps the filter; its system calls are now performed by the
// SIGSYS handler instead of being violations. Async-signal-safe, no system call.
void leave_strict_mode() noexcept;

// Whether the calling thread has the filter installed / is in its strict run phase.
bool strict_mode_installed() noexcept;
bool in_strict_run_phase() noexcept;

struct StrictViolation {
  long nr = -1;           // system call number (x86-64)
  uint64_t ip = 0;        // address after the syscall instruction
  int lcore = -1;         // rte_lcore_id() of the thread, -1 if not an lcore
  const char* name = "";  // "getpid", ... ("" when not in the runtime's table)
};

// Run-phase violations recorded so far in the process (kRecord; kKill dies at the first).
// Any thread, lock-free.
uint64_t strict_violations() noexcept;
StrictViolation first_strict_violation() noexcept;
// System calls performed for threads that left strict mode (forwarded by the handler).
uint64_t strict_forwarded_calls() noexcept;

// A short name of an x86-64 system call number for messages, "" when unknown.
const char* syscall_name(long nr) noexcept;

}  // namespace rdmx::rt
