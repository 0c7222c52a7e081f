#include "server/thread_latency.h"

#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#endif

namespace hearth::server {

void prefer_short_slices_for_this_thread() {
#if defined(__linux__) && defined(SYS_sched_setattr)
  thread_local bool done = false;
  if (done) return;
  done = true;
  // struct sched_attr (linux/sched/types.h), declared here: glibc has no wrapper.
  struct SchedAttr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
  } attr{};
  if (sched_getscheduler(0) != SCHED_OTHER) return;  // leave a chosen policy alone
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  attr.sched_nice = getpriority(PRIO_PROCESS, 0);  // per thread on Linux: keep this thread's nice
  attr.sched_runtime = 100'000;                    // ns: the custom slice of fair tasks (6.12+)
  syscall(SYS_sched_setattr, 0, &attr, 0u);
#endif
}

}  // namespace hearth::server
