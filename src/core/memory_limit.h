// How much memory this process may still allocate: the kernel's MemAvailable, capped by the
// cgroup's memory limit (containers) where one is set.
#pragma once
#include <cstddef>

namespace hearth {

// Bytes; 0 when neither /proc/meminfo nor the cgroup files can be read.
size_t available_memory_bytes();

}  // namespace hearth
