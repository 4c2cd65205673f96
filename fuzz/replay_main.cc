// The replay driver of the plain (non-fuzz) build: a main() for the same harness sources that
// libFuzzer links with -fsanitize=fuzzer, so that ctest runs every checked-in corpus through each
// LLVMFuzzerTestOneInput with the ordinary compiler: every seed, and every input a fuzzer found a
// bug with (kept as a seed), runs in every test run, and a harness property that aborts fails it.
//
//   fuzz_replay_<name> PATH...
//
// Each PATH is a directory (every regular file in it, in name order) or a single file. A missing
// directory, or one with no files, is an error: a deleted or emptied corpus must not pass as "ran
// nothing, found nothing". Prints each input before running it (so the last line before a crash
// names the input) and the number of inputs per PATH. Exit status: 0 when every input ran, 1 on a
// missing or empty PATH, 2 on a usage error; a harness that finds a bug aborts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

bool readFile(const fs::path& path, std::vector<char>& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !f.bad();
}

// Runs one input from a heap buffer of exactly its size (as libFuzzer does), so that a sanitizer
// build reports a read past its end.
bool runOne(const fs::path& path) {
  std::vector<char> bytes;
  if (!readFile(path, bytes)) {
    std::fprintf(stderr, "fuzz replay: cannot read %s\n", path.c_str());
    return false;
  }
  std::printf("running %s (%zu bytes)\n", path.c_str(), bytes.size());
  std::fflush(stdout);
  auto copy = std::make_unique<std::uint8_t[]>(bytes.size());
  std::copy(bytes.begin(), bytes.end(), copy.get());
  LLVMFuzzerTestOneInput(copy.get(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    std::error_code ec;
    if (fs::is_regular_file(arg, ec)) {
      if (!runOne(arg)) ok = false;
      continue;
    }
    if (!fs::is_directory(arg, ec)) {
      std::fprintf(stderr, "fuzz replay: %s: no such file or directory\n", arg.c_str());
      ok = false;
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(arg, ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    if (ec) {
      std::fprintf(stderr, "fuzz replay: %s: %s\n", arg.c_str(), ec.message().c_str());
      ok = false;
      continue;
    }
    std::sort(files.begin(), files.end());
    std::size_t ran = 0;
    for (const auto& f : files) {
      if (runOne(f)) ++ran;
    }
    if (ran == 0 || ran != files.size()) {
      std::fprintf(stderr, "fuzz replay: %s: %zu of %zu inputs ran (an empty corpus fails)\n",
                   arg.c_str(), ran, files.size());
      ok = false;
      continue;
    }
    std::printf("fuzz replay: %s: %zu inputs\n", arg.c_str(), ran);
  }
  return ok ? 0 : 1;
}
