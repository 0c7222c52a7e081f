// Thread-local scratch buffers keep their capacity between calls, so encoding allocates nothing
// per call in steady state. After a huge input they would keep it for the thread's life (a 30 MB
// prompt pinned hundreds of MB per server thread), so past this size (a prompt of some 100 KB) they
// give it back.
#pragma once
#include <cstddef>

namespace hearth::tok {

inline constexpr size_t kScratchKeepBytes = size_t{256} << 10;

template <class Buffer>
void release_if_large(Buffer& b) {
  if (b.capacity() * sizeof(typename Buffer::value_type) > kScratchKeepBytes) Buffer().swap(b);
}

}  // namespace hearth::tok
