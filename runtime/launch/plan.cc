#include "runtime/launch/plan.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <system_error>

namespace grapevine::launch {
namespace {

std::set<std::string> localAddresses() {
  std::set<std::string> out = {"localhost", "127.0.0.1", "::1", "0.0.0.0"};
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) out.insert(name);
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      char buf[INET6_ADDRSTRLEN] = {0};
      if (i->ifa_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
        out.insert(buf);
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf,
                  sizeof buf);
        out.insert(buf);
      }
    }
    freeifaddrs(ifs);
  }
  return out;
}

bool isLocal(const std::string& host, const std::set<std::string>& local) {
  return local.count(host) || host.rfind("127.", 0) == 0;
}

}  // namespace

Result<Plan> makePlan(const Options& options, config::Config config) {
  Plan plan;
  plan.config = std::move(config);
  plan.out = options.out.empty() ? plan.config.output.dir : options.out;
  std::error_code ec;
  std::filesystem::create_directories(plan.out, ec);
  if (ec) return failedPrecondition("cannot create " + plan.out + ": " + ec.message());
  const auto local = localAddresses();
  plan.addresses = plan.config.peers.addresses();
  for (int r = 0; r < plan.config.peers.count; ++r) {
    // `auto` (with peers.rendezvous) is whichever machine the peer runs on: here.
    if (plan.addresses[r].host != "auto" && !isLocal(plan.addresses[r].host, local)) continue;
    plan.ranks.push_back(r);
  }
  if (plan.ranks.empty()) {
    return invalidArgument("no peer of " + options.configPath + " has a local host; start " +
                           (options.command.empty() ? "peers with `grapevine peer CONFIG --rank R`"
                                                    : "the command with GRAPEVINE_RANK=R") +
                           " on their hosts");
  }
  plan.peerOverrides = options.overrides;
  return plan;
}

}  // namespace grapevine::launch
