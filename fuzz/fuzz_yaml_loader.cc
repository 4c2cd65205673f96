// libFuzzer target: the YAML config loader (runtime/config/loader.h) on arbitrary text, with the
// checks `grapevine validate` runs (topology built and checked, every diagnostic formatted). The
// loader's contract: errors come back as diagnostics, never a crash, a throw or a hang.
//
// Input: the config text. The environment is not read (LoadOptions::getenv returns null), and the
// display name sits in a directory that does not exist, so relative paths in the text name
// nothing.
// Properties beyond "no crash, no sanitizer report": every error diagnostic has a message, and a
// config that loads prints (toYaml, `grapevine config --print`) as YAML that loads again to the
// same printed config.
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/config/loader.h"

using namespace grapevine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  config::LoadOptions options;
  options.useEnvironment = false;
  options.getenv = [](const char*) -> const char* { return nullptr; };
  options.checkTopology = true;
  const std::string name = "/nonexistent-grapevine-fuzz/fuzz.yaml";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  config::LoadResult r = config::loadString(text, name, options);
  for (const auto& d : r.diagnostics) {
    if (!d.warning && d.message.empty()) std::abort();
  }
  (void)config::formatDiagnostics(r.diagnostics);
  if (!r.ok()) return 0;
  const std::string printed = config::toYaml(r.config);
  config::LoadResult again = config::loadString(printed, name, options);
  if (!again.ok()) std::abort();
  if (config::toYaml(again.config) != printed) std::abort();
  return 0;
}
