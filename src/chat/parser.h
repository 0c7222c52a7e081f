// Parser for the Jinja2 subset chat templates use: jinja2/parser.py's grammar and precedence
// (filters and `is` tests bind tighter than arithmetic; `~` between + and *; unary minus
// binds tighter than ** as in Jinja, not Python). Errors name line and column.
#pragma once
#include <memory>
#include <string_view>

#include "chat/ast.h"

namespace hearth::chat {

std::shared_ptr<TemplateProgram> parse_template(std::string_view source);

}  // namespace hearth::chat
