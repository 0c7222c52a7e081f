// The chat page's files (web/), compiled into the server library by cmake/embed_files.cmake so
// that an installed or copied binary serves the page without the source tree.
#pragma once
#include <cstddef>
#include <span>

namespace hearth::server {

struct WebAsset {
  const char* name;  // file name, e.g. "index.html"
  const unsigned char* data;
  std::size_t size;
};

std::span<const WebAsset> web_assets();

}  // namespace hearth::server
