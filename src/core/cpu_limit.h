// How many CPUs this process may use: the affinity mask, capped by a cgroup CPU quota (v2
// cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us) on the process's cgroup or any ancestor.
// The default thread count follows it: threads beyond it only wait for each other's cores.
// The parsers are pure functions of the files' text so they can be tested on strings.
#pragma once
#include <filesystem>
#include <string_view>

namespace hearth {

// CPUs allowed by a quota of `quota` time units per `period`: ceil(quota / period), at least 1.
// 0 when there is no limit (quota <= 0 or period <= 0).
int cgroup_cpu_limit_from(long long quota, long long period);

// cgroup v2 cpu.max text: "max 100000" (no limit: 0) or "200000 100000" (2); the period may be
// left out (100000). Anything unreadable counts as no limit (0).
int cgroup_cpu_limit_v2(std::string_view cpu_max);

// cgroup v1: cpu.cfs_quota_us ("-1" is no limit) and cpu.cfs_period_us texts; 0 when unlimited
// or unreadable.
int cgroup_cpu_limit_v1(std::string_view quota_us, std::string_view period_us);

// The tightest quota over the process's cgroup and its ancestors, given /proc/self/cgroup's text
// and the cgroup mount root (/sys/fs/cgroup: cgroup v2 there, or v1 controllers in folders
// under it with v2 in unified/). 0 when no level sets one.
int cgroup_cpu_limit(std::string_view proc_self_cgroup, const std::filesystem::path& root);

// CPUs in the affinity mask, capped by the cgroup quota; at least 1.
int available_cores();

}  // namespace hearth
