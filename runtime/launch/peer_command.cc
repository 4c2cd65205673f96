#include "runtime/launch/peer_command.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "runtime/config/loader.h"

namespace grapevine::launch {

std::string selfPath() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

std::string pythonModuleDir(const std::string& self) {
  const std::filesystem::path bin = std::filesystem::path(self).parent_path();
  const std::filesystem::path installed = GRAPEVINE_INSTALL_PYTHONDIR;
  for (const auto& dir :
       {bin / ".." / "python", installed.is_absolute() ? installed : bin / ".." / installed}) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) {
      return std::filesystem::weakly_canonical(dir, ec).string();
    }
  }
  return "";
}

// The resolved config as one file, so that every command (and the API in it) trains exactly what
// this launch planned; loading it back must give the same config, checked here.
Status PeerCommand::writeResolvedConfig() {
  if (builtIn()) return Status::ok();
  config::Config resolved = plan_.config;
  std::error_code ec;
  resolved.output.dir = std::filesystem::absolute(plan_.out, ec).string();
  // The key stays where it is (relative to the config's folder, not to DIR).
  if (!resolved.security.keyFile.empty()) {
    resolved.security.keyFile = std::filesystem::absolute(plan_.config.keyFilePath(), ec).string();
  }
  if (network_) {
    resolved.peers.list.clear();
    for (int r = 0; r < resolved.peers.count; ++r) {
      resolved.peers.list.push_back({network_->address(r), plan_.addresses[r].port});
    }
  }
  const std::string text = config::toYaml(resolved);
  resolvedConfig_ = resolved.output.dir + "/config.resolved.yaml";
  config::LoadOptions noEnvironment;
  noEnvironment.useEnvironment = false;
  const config::LoadResult again = config::loadString(text, resolvedConfig_, noEnvironment);
  if (!again.ok() || config::toYaml(again.config) != text) {
    return internalError("internal error: the resolved config does not load back the same:\n" +
                         config::formatDiagnostics(again.diagnostics));
  }
  std::ofstream file(resolvedConfig_, std::ios::trunc);
  file << "# Written by grapevine launch from " << options_.configPath
       << " with its overrides: the config every command of this run reads (GRAPEVINE_CONFIG).\n"
       << text;
  file.close();
  if (!file) return failedPrecondition("cannot write " + resolvedConfig_);
  return Status::ok();
}

std::vector<std::string> PeerCommand::argv(int rank, const std::string& self, bool resumeAll,
                                           bool resuming) const {
  std::vector<std::string> argv = options_.command;
  if (builtIn()) {
    argv = {self, "peer", options_.configPath, "--rank", std::to_string(rank), "--out", plan_.out};
    if (resumeAll) argv.push_back("--resume");
    for (const auto& o : plan_.peerOverrides) {
      argv.push_back("--set");
      argv.push_back(o);
    }
    if (resuming && std::find(argv.begin(), argv.end(), "--resume") == argv.end())
      argv.push_back("--resume");
  }
  if (network_) {
    auto prefix = network_->execPrefix(rank);
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
  }
  return argv;
}

std::vector<std::pair<std::string, std::string>> PeerCommand::environment(int rank,
                                                                          const std::string& self,
                                                                          bool resume) const {
  if (builtIn()) return {};
  std::error_code ec;
  std::vector<std::pair<std::string, std::string>> env = {
      {"GRAPEVINE_CONFIG", resolvedConfig_},
      {"GRAPEVINE_RANK", std::to_string(rank)},
      {"GRAPEVINE_WORLD_SIZE", std::to_string(plan_.config.peers.count)},
      {"GRAPEVINE_OUT", std::filesystem::absolute(plan_.out, ec).string()},
  };
  // 1: the API (Options::resume) continues from the checkpoints, as `grapevine peer --resume`.
  // Always set, so that a value in the launcher's own environment is not inherited.
  env.emplace_back("GRAPEVINE_RESUME", resume ? "1" : "0");
  if (const std::string module = pythonModuleDir(self); !module.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    env.emplace_back("PYTHONPATH", old && *old ? module + ":" + old : module);
  }
  return env;
}

}  // namespace grapevine::launch
