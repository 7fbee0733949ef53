// Asserting on the exact error a call throws: error_of() returns the message, caught() the
// exception itself (for ConfigError's diagnostics). Either fails the test when nothing is thrown.
#pragma once

#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "wam/error.h"

namespace wam::testing {

// The exception of type E that `call` throws; a test failure and nullopt when it returns normally.
// Exceptions of other types propagate (and fail the test as uncaught).
template <class E, class F>
std::optional<E> caught(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e;
  }
  ADD_FAILURE() << "expected an exception, but the call returned normally";
  return std::nullopt;
}

// The message of the wam::Error that `call` throws; a test failure and "" when it returns normally.
template <class F>
std::string error_of(F&& call) {
  const std::optional<Error> error = caught<Error>(std::forward<F>(call));
  return error ? error->what() : "";
}

}  // namespace wam::testing

// Expects `statement` to throw a wam::Error whose message is exactly `text`.
#define EXPECT_ERROR(statement, text) EXPECT_EQ(::wam::testing::error_of([&] { statement; }), text)
