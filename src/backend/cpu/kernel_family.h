// The kernel families of the CPU decode kernels for packed weights (trellis_matvec,
// affine_matvec): AVX-512, AVX2 and a generic baseline. Each kernel file says which families this
// CPU can run (their instruction needs differ); the helpers here pick the best one and let tests
// and benchmarks name a family.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace hearth::cpu {

enum class KernelFamily { Avx512, Avx2, Generic };
inline constexpr KernelFamily kKernelFamilies[] = {KernelFamily::Avx512, KernelFamily::Avx2,
                                                   KernelFamily::Generic};  // best first

inline const char* kernel_family_name(KernelFamily f) {
  constexpr const char* kNames[] = {"avx512", "avx2", "generic"};
  return kNames[int(f)];
}

using FamilySupported = bool (*)(KernelFamily);

// The best family `supported` allows (the generic one always runs).
inline KernelFamily best_kernel_family(FamilySupported supported) {
  for (KernelFamily f : kKernelFamilies)
    if (supported(f)) return f;
  return KernelFamily::Generic;
}

// The names of the families `supported` allows, best first.
inline std::vector<std::string> kernel_family_names(FamilySupported supported) {
  std::vector<std::string> out;
  for (KernelFamily f : kKernelFamilies)
    if (supported(f)) out.push_back(kernel_family_name(f));
  return out;
}

// The family called `name`; throws naming `what` when it is unknown or not supported.
inline KernelFamily kernel_family_named(std::string_view name, FamilySupported supported,
                                        std::string_view what) {
  for (KernelFamily f : kKernelFamilies)
    if (name == kernel_family_name(f) && supported(f)) return f;
  fail("{}: kernel family '{}' is unknown or not supported by this CPU", what, name);
}

}  // namespace hearth::cpu
