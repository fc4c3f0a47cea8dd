// The built libvramscope_inject.so, loaded the way the CUDA driver loads it (dlopen, then
// InitializeInjection) in a process that has not initialized CUDA. Whatever the machine has
// (no libcupti, no GPU, or a working GPU), the library must come back: it returns, never throws
// or exits, and writes either nothing or exactly one "vramscope: native capture disabled: ..."
// line on stderr.
#include <dlfcn.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

using ::testing::StartsWith;

TEST(CaptureInject, ExportsInitializeInjectionAndComesBackWithAtMostOneLine) {
  char pattern[] = "/tmp/vramscope_inject_test_XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path dir = pattern;
  ::setenv("VRAMSCOPE_CAPTURE_DIR", dir.c_str(), 1);
  ::setenv("RANK", "7", 1);

  void* library = ::dlopen(VRAMSCOPE_INJECT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << ::dlerror();
  auto* init = reinterpret_cast<int (*)()>(::dlsym(library, "InitializeInjection"));
  ASSERT_NE(init, nullptr);

  const std::filesystem::path err_path = dir / "stderr.txt";
  const int saved = ::dup(2);
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(err, 2);
  const int result = init();
  ::dup2(saved, 2);
  ::close(err);
  ::close(saved);

  std::ifstream in(err_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string line = text.str();
  if (result == 1) {
    EXPECT_EQ(line, "");
    EXPECT_TRUE(std::filesystem::exists(dir / "rank7.vstrace"));
  } else {
    EXPECT_EQ(result, 0);
    EXPECT_THAT(line, StartsWith("vramscope: native capture disabled: "));
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  }
  std::cout << "InitializeInjection returned " << result << (line.empty() ? "" : ": ") << line;
  ::unsetenv("RANK");
  ::unsetenv("VRAMSCOPE_CAPTURE_DIR");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);  // a recording library still writes to its open file
}

}  // namespace
