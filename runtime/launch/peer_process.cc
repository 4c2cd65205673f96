#include "runtime/launch/peer_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <utility>
#include <vector>

namespace grapevine::launch {

void readNewRecords(PeerProcess& p) {
  std::ifstream in(p.jsonl);
  if (!in) return;
  in.seekg(p.offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial line: read it next time
    p.offset = in.tellg();
    try {
      auto j = nlohmann::json::parse(line);
      if (!j.is_object()) continue;
      if (j.contains("test_accuracy") && j["test_accuracy"].is_number()) {
        p.accuracy = j["test_accuracy"].get<double>();
      }
      if (j.contains("test_loss") && j["test_loss"].is_number()) {
        p.testLoss = j["test_loss"].get<double>();
      }
      if (j.contains("round") && j["round"].is_number()) p.last = std::move(j);
    } catch (const nlohmann::json::exception&) {
    }
  }
}

std::string tailLines(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size();
       ++i) {
    out += "    " + all[i] + "\n";
  }
  return out;
}

void signalGroup(pid_t pid, int sig) {
  if (pid <= 1) return;
  if (kill(-pid, sig) != 0) kill(pid, sig);
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

}  // namespace grapevine::launch
