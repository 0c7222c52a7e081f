// Scheduling of the HTTP handler threads next to the engine's compute threads. During decoding
// the compute threads keep every core busy (they spin between ops), so a handler woken to send a
// token waits for a core: with Linux's EEVDF scheduler a woken thread with the default slice can
// wait until the running one's slice ends (milliseconds), which shows up as time to first token.
// Handler threads need only microseconds per wake-up, so they ask for a short slice: EEVDF then
// gives them an earlier deadline and lets them preempt at once (PREEMPT_SHORT). The CPU they use
// is the same; only when they get it changes. Unprivileged; a no-op on kernels before 6.12 and
// elsewhere.
#pragma once

namespace hearth::server {

// Once per thread: requests a 100 µs scheduler slice for the calling thread (keeps its policy
// and nice value). Failures are ignored: it is a latency hint, never a requirement.
void prefer_short_slices_for_this_thread();

}  // namespace hearth::server
