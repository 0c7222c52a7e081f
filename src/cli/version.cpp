// `hearth --version`: the version and the backends and CPU kernels compiled in.
#include <string>

namespace hearth::cli {

std::string version_string() {
  std::string s = "hearth " HEARTH_VERSION "\nbackends: cpu";
#ifdef HEARTH_HAVE_CUDA
  s += ", cuda";
#endif
  return s;
}

}  // namespace hearth::cli
