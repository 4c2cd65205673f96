// `grapevine config --explain`: every config key from the schema table.
// `grapevine config CONFIG`: the effective config (defaults < YAML < environment < --set) as YAML.
#include <iomanip>
#include <iostream>

#include "runtime/config/loader.h"
#include "runtime/config/schema.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

struct ConfigArgs {
  bool explain = false;
  bool markdown = false;
  std::string path;
  std::vector<std::string> overrides;
};

std::string defaultText(const config::KeyDef& k) {
  static const config::Config defaults;
  return k.show(defaults);
}

void explainText(std::ostream& os) {
  std::string section;
  for (const auto& k : config::schema()) {
    const std::string s = k.path.substr(0, k.path.find('.'));
    if (s != section) {
      os << (section.empty() ? "" : "\n") << s << ":\n";
      section = s;
    }
    os << "  " << std::left << std::setw(30) << k.path << " " << std::setw(12) << k.typeName()
       << " default "
       << (k.required   ? "(required)"
           : k.optional ? "(unset)"
                        : defaultText(k));
    const std::string range = k.rangeText();
    if (!range.empty()) os << "  range " << range;
    os << "\n      " << k.doc << "\n";
  }
  os << "\nEvery key can also be set with the environment (GRAPEVINE_<KEY>, e.g. "
     << config::envName("topology.kind") << "=torus) or on the command line (--set key=value).\n";
}

void explainMarkdown(std::ostream& os) {
  os << "| key | type | default | range | meaning | environment |\n|---|---|---|---|---|---|\n";
  for (const auto& k : config::schema()) {
    std::string range = k.rangeText();
    for (size_t p = 0; (p = range.find('|', p)) != std::string::npos; p += 2)
      range.replace(p, 1, "\\|");
    os << "| `" << k.path << "` | " << k.typeName() << " | "
       << (k.required   ? "(required)"
           : k.optional ? "(unset)"
                        : "`" + defaultText(k) + "`")
       << " | " << range << " | " << k.doc << " | `" << config::envName(k.path) << "` |\n";
  }
}

int runConfig(const ConfigArgs& a) {
  if (a.explain) {
    if (a.markdown)
      explainMarkdown(std::cout);
    else
      explainText(std::cout);
    return kExitOk;
  }
  if (a.path.empty()) {
    std::cerr << "grapevine config: give --explain, or a CONFIG to print its effective values\n";
    return kExitBadInput;
  }
  auto c = loadConfig(a.path, a.overrides);
  if (!c.isOk()) return kExitBadInput;
  std::cout << config::toYaml(*c);
  return kExitOk;
}

}  // namespace

Command registerConfig(CLI::App& root) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* app = root.add_subcommand(
      "config", "Explain every config key (--explain), or print a config's effective values");
  app->add_flag("--explain", args->explain, "List every key: type, default, range, meaning");
  app->add_flag("--markdown", args->markdown, "With --explain: a Markdown table (docs/config.md)");
  app->add_option("config", args->path, "YAML config file whose effective values to print");
  app->add_option("--set", args->overrides,
                  "Override a key: --set topology.kind=torus (repeatable)");
  return {app, [args] { return runConfig(*args); }};
}

}  // namespace grapevine::cli
