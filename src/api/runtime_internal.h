// The engine behind a hearth::Runtime, for the HTTP server library (src/server/api_server.cpp):
// its routes need what the public API does not offer yet (tool calls, reasoning, logprobs,
// penalties, tokenizing), so it serves the Runtime's own engine rather than going through
// Runtime::submit. Not installed; docs/design-notes.md, "The HTTP server as a library".
#pragma once
#include <memory>

#include "hearth/hearth.h"

namespace hearth {

class Engine;

struct RuntimeInternals {
  // Shared: the server keeps the engine alive while a handler still holds a request. The
  // Runtime's destructor shuts it down all the same, so its own requests complete while it lives.
  static std::shared_ptr<Engine> engine(const Runtime& runtime);
  // The options it was loaded with (the server derives its model id and default thread count).
  static const RuntimeOptions& options(const Runtime& runtime);
};

}  // namespace hearth
