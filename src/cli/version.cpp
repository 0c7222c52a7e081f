// `hearth --version`: the version, the commit it was built from, and the backends compiled in
// (with the CUDA architectures, since a binary runs only on GPUs of those or newer families).
#include <string>

namespace hearth::cli {

const char* build_commit();  // generated/build_info.cpp (cmake/build_info.cmake)
const char* build_cuda_archs();

std::string version_string() {
  std::string s = std::string("hearth " HEARTH_VERSION " (commit ") + build_commit() + ")";
  s += "\nbackends: cpu";
#ifdef HEARTH_HAVE_CUDA
  s += std::string(", cuda (sm ") + build_cuda_archs() + ")";
#endif
  return s;
}

}  // namespace hearth::cli
