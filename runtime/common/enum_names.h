// Name tables of enums that count from 0: `constexpr std::string_view kNames[] = {...}` in enum
// order, and these three helpers for the name of a value, the value of a name, and the list the
// config schema offers. One table per enum, defined by the library that owns the enum.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace grapevine {

template <typename E, std::size_t N>
std::string_view enumName(const std::string_view (&names)[N], E value,
                          std::string_view unknown = "unknown") {
  const auto i = static_cast<std::size_t>(value);
  return i < N ? names[i] : unknown;
}

template <typename E, std::size_t N>
std::optional<E> parseEnum(const std::string_view (&names)[N], std::string_view name) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

template <std::size_t N>
std::vector<std::string_view> enumNameList(const std::string_view (&names)[N]) {
  return std::vector<std::string_view>(names, names + N);
}

}  // namespace grapevine
