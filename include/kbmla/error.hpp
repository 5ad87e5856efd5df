// Errors raised by the host API. Every message names the offending value and the
// allowed range, so a caller can fix the call without reading this library's source.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kbmla {

class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& what) : std::invalid_argument("kbmla: " + what) {}
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
}  // namespace detail

// Throws kbmla::Error built from the streamed parts when `ok` is false.
template <class... Parts>
void require(bool ok, Parts&&... parts) {
  if (!ok) throw Error(detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace kbmla
