// Fuzz target: a safetensors file image (8-byte header length, JSON header, data section) through
// safetensors_parse, the validation SafetensorsFile::open runs on every checkpoint. Covers the
// header JSON, dtypes, shapes (overflowing numel), data_offsets against the data section and the
// overlap check. A file that passes must satisfy the documented invariants, checked here: every
// tensor's bytes lie inside the image and equal numel * dtype size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hearth;
  SafetensorsContents contents;
  try {
    contents = safetensors_parse(data, size, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  for (const SafetensorsTensor& t : contents.tensors) {
    const auto* begin = static_cast<const uint8_t*>(t.data);
    if (begin < data || begin + t.nbytes > data + size)
      fuzz::invariant_failed("tensor data outside the image", t.name);
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    if (numel * dtype_size(t.dtype) != t.nbytes)
      fuzz::invariant_failed("tensor size differs from its shape", t.name);
    // Reads the first and last byte: ASan reports any byte range that is not really there.
    if (t.nbytes > 0) {
      volatile uint8_t sink = begin[0] ^ begin[t.nbytes - 1];
      (void)sink;
    }
  }
  return 0;
}
