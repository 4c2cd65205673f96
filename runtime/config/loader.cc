#include "runtime/config/loader.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "runtime/config/schema.h"
#include "runtime/security/key.h"
#include "topology/topology.h"

namespace grapevine::config {
namespace {

struct Where {
  std::string file;
  int line = 0;
  int column = 0;
};

class Loader {
 public:
  Loader(const LoadOptions& options, std::string displayName)
      : options_(options), file_(std::move(displayName)) {}

  LoadResult run(std::string_view text) {
    result_.config.sourcePath = file_;
    if (prescan(text)) {
      parseYaml(text);
    }
    if (options_.useEnvironment) applyEnvironment();
    applyOverrides();
    if (errors() == 0) checkSemantics();
    return std::move(result_);
  }

  void error(const Where& w, std::string key, std::string message) {
    result_.diagnostics.push_back(
        {w.file, w.line, w.column, std::move(key), std::move(message), false});
  }
  // Peers' hosts are numeric IP addresses (or localhost, or `auto` with a rendezvous): the
  // transports do not resolve names, so a hostname would pass here and fail every peer at start.
  void checkHosts() {
    const Config& c = result_.config;
    auto numeric = [](std::string host) {
      if (host == "localhost") return true;
      if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
      }
      unsigned char buf[sizeof(in6_addr)];
      return inet_pton(AF_INET, host.c_str(), buf) == 1 ||
             inet_pton(AF_INET6, host.c_str(), buf) == 1;
    };
    const std::string why =
        ": hosts must be numeric IP addresses (or localhost); names are not resolved. On machines "
        "a scheduler assigns, use peers.host: auto with peers.rendezvous";
    if (c.peers.list.empty()) {
      if (c.peers.host != "auto" && !numeric(c.peers.host)) {
        error(keyWhere("peers.host"), "peers.host", "\"" + c.peers.host + "\"" + why);
      }
      return;
    }
    for (std::size_t r = 0; r < c.peers.list.size(); ++r) {
      if (!numeric(c.peers.list[r].host)) {
        error(keyWhere("peers.list"), "peers.list",
              "peer " + std::to_string(r) + "'s host \"" + c.peers.list[r].host + "\"" + why);
      }
    }
  }

  // A control port inside this machine's ephemeral range (net.ipv4.ip_local_port_range) can be
  // taken as the local port of an outgoing connection before its peer listens on it: the peer then
  // fails with "address already in use" at random. Warned, not refused: the range is this
  // machine's, the peers may run elsewhere.
  void checkEphemeralPorts() {
    const Config& c = result_.config;
    std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
    int low = 0, high = 0;
    if (!(in >> low >> high) || low <= 0 || high < low) return;
    std::vector<int> ports;
    for (const auto& a : c.peers.addresses()) ports.push_back(a.port);
    if (ports.empty()) return;
    const auto [lo, hi] = std::minmax_element(ports.begin(), ports.end());
    const bool inside =
        std::any_of(ports.begin(), ports.end(), [&](int p) { return p >= low && p <= high; });
    if (!inside) return;
    const std::string key = c.peers.list.empty() ? "peers.base_port" : "peers.list";
    warning(keyWhere(key), key,
            "control ports " + std::to_string(*lo) + "-" + std::to_string(*hi) +
                " overlap this machine's ephemeral port range " + std::to_string(low) + "-" +
                std::to_string(high) +
                " (net.ipv4.ip_local_port_range): an outgoing connection can take a peer's port "
                "before it listens; use ports below " +
                std::to_string(low));
  }

  void warning(const Where& w, std::string key, std::string message) {
    result_.diagnostics.push_back(
        {w.file, w.line, w.column, std::move(key), std::move(message), true});
  }
  int errors() const {
    return static_cast<int>(std::count_if(result_.diagnostics.begin(), result_.diagnostics.end(),
                                          [](const Diagnostic& d) { return !d.warning; }));
  }

 private:
  Where fileWhere(int line = 0, int column = 0) const { return {file_, line, column}; }
  Where nodeWhere(const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    if (m.line < 0) return fileWhere();
    return {file_, m.line + 1, m.column + 1};
  }
  Where keyWhere(const std::string& path) const {
    auto it = seen_.find(path);
    if (it != seen_.end()) return it->second;
    return fileWhere();
  }
  bool wasSet(const std::string& path) const { return seen_.count(path) != 0; }

  // Refuses input the YAML parser should never see: binary data, tabs as indentation, absurd
  // nesting.
  bool prescan(std::string_view text) {
    if (text.size() > options_.maxFileBytes) {
      error(fileWhere(), "",
            "file is " + std::to_string(text.size()) + " bytes; the limit is " +
                std::to_string(options_.maxFileBytes));
      return false;
    }
    int line = 1;
    int col = 1;
    bool atLineStart = true;
    int flowDepth = 0;
    bool inSingle = false;
    bool inDouble = false;
    bool inComment = false;
    for (size_t i = 0; i < text.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if (c == 0 || (c < 0x20 && c != '\n' && c != '\r' && c != '\t')) {
        error(fileWhere(line, col), "",
              "not a text file: control byte 0x" + hex(c) + "; a config is YAML text");
        return false;
      }
      if (c == '\n') {
        ++line;
        col = 1;
        atLineStart = true;
        inComment = false;
        inSingle = inDouble = false;  // plain YAML scalars do not span lines in configs
        continue;
      }
      if (atLineStart && c == '\t') {
        error(fileWhere(line, col), "",
              "tab character in indentation; YAML indents with spaces only");
        return false;
      }
      if (c != ' ') atLineStart = false;
      if (atLineStart && col > 4 * options_.maxDepth) {
        error(fileWhere(line, col), "",
              "indentation nested deeper than " + std::to_string(options_.maxDepth) + " levels");
        return false;
      }
      if (!inComment && !inSingle && !inDouble) {
        if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\n'))
          inComment = true;
        else if (c == '\'')
          inSingle = true;
        else if (c == '"')
          inDouble = true;
        else if (c == '[' || c == '{') {
          if (++flowDepth > options_.maxDepth) {
            error(fileWhere(line, col), "",
                  "brackets nested deeper than " + std::to_string(options_.maxDepth) + " levels");
            return false;
          }
        } else if ((c == ']' || c == '}') && flowDepth > 0) {
          --flowDepth;
        }
      } else if (inSingle && c == '\'') {
        inSingle = false;
      } else if (inDouble && c == '"' && text[i - 1] != '\\') {
        inDouble = false;
      }
      ++col;
    }
    if (!validUtf8(text)) {
      error(fileWhere(), "", "not a text file: invalid UTF-8; a config is YAML text");
      return false;
    }
    return true;
  }

  static std::string hex(unsigned char c) {
    static const char* d = "0123456789abcdef";
    return {d[c >> 4], d[c & 15]};
  }

  static bool validUtf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
      if (n < 0 || i + n >= s.size() + (n == 0 ? 1 : 0)) {
        if (n != 0) return false;
      }
      for (int k = 1; k <= n; ++k) {
        if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
      }
      i += n + 1;
    }
    return true;
  }

  void parseYaml(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      std::string msg = e.msg;
      error(fileWhere(e.mark.line >= 0 ? e.mark.line + 1 : 0,
                      e.mark.column >= 0 ? e.mark.column + 1 : 0),
            "", "YAML syntax: " + msg);
      return;
    }
    if (!root || root.IsNull()) {
      error(fileWhere(), "",
            "the file is empty; expected a mapping of sections (run, peers, topology, ...)");
      return;
    }
    if (!root.IsMap()) {
      error(nodeWhere(root), "",
            "expected a mapping of sections (run, peers, topology, ...), found " +
                describeNode(root));
      return;
    }
    walkMap(root, "");
  }

  static bool isSectionPrefix(const std::string& prefix) {
    const std::string p = prefix + ".";
    for (const auto& k : schema()) {
      if (k.path.compare(0, p.size(), p) == 0) return true;
    }
    return false;
  }

  void walkMap(const YAML::Node& map, const std::string& prefix) {
    std::map<std::string, int> firstLine;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (++visited_ > kMaxNodes) {
        error(nodeWhere(it->first), "",
              "too many entries (more than " + std::to_string(kMaxNodes) + ")");
        return;
      }
      const YAML::Node keyNode = it->first;  // copies: *it is a temporary proxy
      const YAML::Node value = it->second;
      if (!keyNode.IsScalar()) {
        error(nodeWhere(keyNode), prefix,
              "keys must be plain names, found " + describeNode(keyNode));
        continue;
      }
      const std::string key = keyNode.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      const Where where = nodeWhere(keyNode);
      auto [pos, inserted] = firstLine.emplace(key, where.line);
      if (!inserted) {
        error(where, path, "duplicate key (first set at line " + std::to_string(pos->second) + ")");
        continue;
      }
      // `peers` may be a list of addresses instead of a mapping.
      if (path == "peers" && value.IsSequence()) {
        applyNode("peers.list", value, where);
        continue;
      }
      // `faults` is the list of events itself (faults.events).
      if (path == "faults" && value.IsSequence()) {
        applyNode("faults.events", value, where);
        continue;
      }
      if (const KeyDef* def = findKey(path)) {
        applyNode(path, value, where);
        (void)def;
        continue;
      }
      if (isSectionPrefix(path)) {
        if (value.IsMap()) {
          walkMap(value, path);
        } else if (!value.IsNull()) {
          error(nodeWhere(value), path, "expected a mapping of keys, found " + describeNode(value));
        }
        continue;
      }
      std::string msg = prefix.empty() ? "unknown section" : "unknown key";
      const std::string suggestion = suggestKey(path);
      if (!suggestion.empty())
        msg += "; did you mean '" + suggestion + "'?";
      else if (prefix.empty()) {
        msg += "; sections are";
        for (const auto& s : sections()) msg += " " + s;
      }
      error(where, path, msg);
    }
  }

  // A key's converter never lets a yaml-cpp exception escape: it becomes "expected ...".
  std::optional<std::string> safeApply(const KeyDef& def, const YAML::Node& node) {
    try {
      return def.apply(result_.config, node);
    } catch (const YAML::Exception&) {
      return std::string("expected");
    }
  }

  void applyNode(const std::string& path, const YAML::Node& value, const Where& where) {
    const KeyDef* def = findKey(path);
    if (auto problem = safeApply(*def, value)) {
      // A converter may say what exactly is wrong (which item of a list, and why).
      const std::string why = *problem == "expected" ? "" : " (" + *problem + ")";
      error(value.Mark().line >= 0 ? nodeWhere(value) : where, path,
            "expected " + def->expected() + why + ", found " + describeNode(value));
      return;
    }
    seen_[path] = where;
  }

  void applyText(const std::string& path, const std::string& text, const Where& where) {
    YAML::Node node;
    try {
      node = YAML::Load(text);
    } catch (const YAML::Exception&) {
      node = YAML::Node(text);
    }
    const KeyDef* def = findKey(path);
    if (auto problem = safeApply(*def, node)) {
      const std::string why = *problem == "expected" ? "" : " (" + *problem + ")";
      error(where, path, "expected " + def->expected() + why + ", found \"" + text + "\"");
      return;
    }
    seen_[path] = where;
  }

  void applyEnvironment() {
    for (const auto& def : schema()) {
      const std::string name = envName(def.path);
      const char* v = options_.getenv ? options_.getenv(name.c_str()) : std::getenv(name.c_str());
      if (v == nullptr) continue;
      applyText(def.path, v, Where{"environment " + name, 0, 0});
    }
  }

  void applyOverrides() {
    for (const auto& o : options_.overrides) {
      const auto eq = o.find('=');
      const Where where{"command line --set " + o, 0, 0};
      if (eq == std::string::npos || eq == 0) {
        error(where, "", "expected KEY=VALUE, e.g. --set topology.kind=torus");
        continue;
      }
      std::string path = o.substr(0, eq);
      if (!findKey(path)) {
        std::string msg = "unknown key";
        const std::string s = suggestKey(path);
        if (!s.empty()) msg += "; did you mean '" + s + "'?";
        error(where, path, msg);
        continue;
      }
      applyText(path, o.substr(eq + 1), where);
    }
  }

  // monitoring.prometheus_port: peer r serves on port + r at its own host, so the range must fit
  // below 65536 and miss the ports the peers reserve on the same host (base_port .. base_port +
  // 2 count - 1 when given by count, as checked above; each list entry's port otherwise).
  void checkMonitoringPorts(const Config& c) {
    const long long first = c.monitoring.prometheusPort;
    if (first == 0) return;
    const long long n = c.peers.count;
    const long long last = first + n - 1;
    const std::string range = std::to_string(first) + ".." + std::to_string(last);
    if (last > 65535) {
      error(keyWhere("monitoring.prometheus_port"), "monitoring.prometheus_port",
            std::to_string(first) + " + one port for each of " + std::to_string(n) +
                " peers passes 65535");
      return;
    }
    if (c.peers.list.empty()) {
      const long long base = c.peers.basePort;
      const long long baseLast = base + 2 * n - 1;
      if (first <= baseLast && base <= last) {
        error(keyWhere("monitoring.prometheus_port"), "monitoring.prometheus_port",
              "ports " + range + " overlap the peers' ports " + std::to_string(base) + ".." +
                  std::to_string(baseLast) + " (peers.base_port) on host " + c.peers.host);
      }
      return;
    }
    std::map<std::pair<std::string, long long>, std::size_t> owner;  // (host, port) -> rank
    for (std::size_t s = 0; s < c.peers.list.size(); ++s)
      owner.emplace(std::make_pair(c.peers.list[s].host, c.peers.list[s].port), s);
    for (std::size_t r = 0; r < c.peers.list.size(); ++r) {
      const long long port = first + static_cast<long long>(r);
      const auto it = owner.find(std::make_pair(c.peers.list[r].host, port));
      if (it != owner.end()) {
        error(keyWhere("monitoring.prometheus_port"), "monitoring.prometheus_port",
              "peer " + std::to_string(r) + "'s metrics port " + std::to_string(port) +
                  " is peer " + std::to_string(it->second) + "'s port in peers.list (host " +
                  c.peers.list[r].host + ")");
        return;
      }
    }
  }

  // Rules that span keys. Each error points at the key that is most likely wrong.
  // topology.directed: only push-sum mixes with weights a directed graph can have (column
  // stochastic, chosen by the sender); it needs every peer's mass to reach every other peer.
  void checkDirected(const Config& c, const topology::Schedule& schedule) {
    const bool pushSum = c.algorithm.name == algorithms::AlgorithmKind::kPushSum;
    if (!pushSum) {
      error(keyWhere("topology.directed"), "topology.directed",
            "true cannot be used with algorithm.name: " +
                std::string(algorithms::algorithmKindName(c.algorithm.name)) +
                ": it mixes with symmetric, doubly stochastic weights w_ij = w_ji, and on a "
                "directed graph a peer cannot weigh a neighbour that does not hear from it; use "
                "algorithm.name: push-sum");
    } else if (!topology::isStronglyConnected(topology::sendGraph(schedule))) {
      error(keyWhere("topology.edges"), "topology.directed",
            "the directed graph is not strongly connected: some peer's model can never reach "
            "some other peer, so push-sum cannot average; add edges so that every peer reaches "
            "every other along the edges' directions (`grapevine topo` reports it)");
    }
  }

  // algorithm.name: push-sum sums the shares it receives, so every byte must arrive as sent.
  // faults.events: every event names existing peers and links of the graph, happens within the
  // run, overlaps no other event on the same peer or link, and uses the unit of the others (rounds
  // or seconds: a runner supports one, checked by the runner); a restart needs checkpoints.
  void checkFaults(const Config& c) {
    const auto& events = c.faults.events;
    if (events.empty()) return;
    const Where where = keyWhere("faults.events");
    const std::string key = "faults.events";
    const auto item = [](std::size_t i) { return "item " + std::to_string(i) + " ("; };
    std::unique_ptr<topology::Schedule> schedule;
    if (errors() == 0 && options_.checkTopology) {
      auto made = topology::makeSchedule(c.topologySpec());
      if (made.isOk()) schedule = std::move(*made);
    }
    bool ranksOk = true;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const FaultEvent& e = events[i];
      const std::string what = item(i) + e.describe() + ")";
      if (e.byRound() != events.front().byRound()) {
        error(where, key,
              what + " counts " + (e.byRound() ? "rounds" : "seconds") + " but item 0 counts " +
                  (events.front().byRound() ? "rounds" : "seconds") +
                  ": a schedule is by round (grapevine sim) or by time (grapevine launch "
                  "--emulate), not both");
      }
      const bool isLink = e.kind == FaultKind::kLinkDown;
      const int a = isLink ? e.linkA : e.peer;
      const int b = isLink ? e.linkB : e.peer;
      if (a >= c.peers.count || b >= c.peers.count) {
        error(where, key,
              what + " names a peer >= peers.count (" + std::to_string(c.peers.count) + ")");
        ranksOk = false;
        continue;
      }
      if (isLink && schedule) {
        const auto na = schedule->allNeighbours(a);
        const auto nb = schedule->allNeighbours(b);
        if (std::find(na.begin(), na.end(), b) == na.end() &&
            std::find(nb.begin(), nb.end(), a) == nb.end()) {
          error(where, key,
                what + ": " + std::to_string(a) + " and " + std::to_string(b) +
                    " are not neighbours in the graph (topology." +
                    std::string(topology::kindName(c.topology.kind)) + ")");
        }
      }
      if (e.byRound() && *e.atRound >= c.run.rounds) {
        error(where, key, what + " never happens: run.rounds is " + std::to_string(c.run.rounds));
      }
      if (e.kind == FaultKind::kRestart) {
        if (c.checkpoint.every <= 0) {
          error(where, key,
                what +
                    " needs checkpoint.every > 0: a restarted peer comes back from its last "
                    "checkpoint");
        } else if (e.byRound() && *e.atRound < c.checkpoint.every) {
          error(where, key,
                what + " comes before the peer's first checkpoint (after round " +
                    std::to_string(c.checkpoint.every - 1) +
                    ", checkpoint.every): it would have nothing to come back from");
        }
      }
    }
    if (!ranksOk) return;
    // Overlaps: two events on one peer, or on one link, at the same time; a killed peer takes no
    // later event.
    for (std::size_t i = 0; i < events.size(); ++i) {
      for (std::size_t j = i + 1; j < events.size(); ++j) {
        const FaultEvent& x = events[i];
        const FaultEvent& y = events[j];
        if (x.byRound() != y.byRound()) continue;
        const bool xl = x.kind == FaultKind::kLinkDown, yl = y.kind == FaultKind::kLinkDown;
        if (xl != yl) continue;
        const bool same =
            xl ? std::minmax(x.linkA, x.linkB) == std::minmax(y.linkA, y.linkB) : x.peer == y.peer;
        if (!same) continue;
        if (x.start() < y.end() && y.start() < x.end()) {
          error(where, key,
                item(i) + x.describe() + ") and " + item(j) + y.describe() + ") overlap on " +
                    (xl ? "the same link" : "the same peer") +
                    (x.kind == FaultKind::kKill || y.kind == FaultKind::kKill
                         ? " (a killed peer stays dead)"
                         : ""));
        }
      }
    }
  }

  void checkPushSum(const Config& c) {
    // Not the default 1 either: a resolved config (toYaml) sets every key.
    if (wasSet("algorithm.overlap_rounds") && c.algorithm.overlapRounds != 1 &&
        (c.algorithm.name != algorithms::AlgorithmKind::kPushSum || !c.algorithm.overlap)) {
      warning(keyWhere("algorithm.overlap_rounds"), "algorithm.overlap_rounds",
              "has no effect: it is the staleness of overlapped push-sum (algorithm.name: "
              "push-sum with algorithm.overlap: true)");
    }
    if (c.algorithm.name != algorithms::AlgorithmKind::kPushSum) return;
    if (c.compression.method != compress::Method::kNone) {
      error(keyWhere("compression.method"), "compression.method",
            std::string(compress::methodName(c.compression.method)) +
                " cannot be used with algorithm.name: push-sum: push-sum sums the (x, w) shares "
                "it receives, and a lossy compressor's error would change the total mass and "
                "bias the average; use compression.method: none (compression.lossless is fine)");
    }
    if (c.compression.errorFeedback) {
      warning(keyWhere("compression.error_feedback"), "compression.error_feedback",
              "has no effect: push-sum sends exact fp32 shares, there is no residual");
    }
    if (wasSet("algorithm.consensus_step")) {
      warning(keyWhere("algorithm.consensus_step"), "algorithm.consensus_step",
              "ignored by push-sum: each peer keeps 1/(out_degree + 1) of its (x, w) and sends "
              "the same share to each out-neighbour");
    }
  }

  void checkSemantics() {
    Config& c = result_.config;
    // peers
    if (!wasSet("peers.count") && !wasSet("peers.list")) {
      error(fileWhere(), "peers.count", "required: set peers.count or give peers as a list");
      return;
    }
    if (wasSet("peers.list") && wasSet("peers.count") &&
        c.peers.count != static_cast<int>(c.peers.list.size())) {
      // The list sets count too; an explicit count that disagrees is a mistake.
      error(keyWhere("peers.count"), "peers.count",
            "is " + std::to_string(c.peers.count) + " but peers lists " +
                std::to_string(c.peers.list.size()) + " addresses");
    }
    if (c.peers.list.empty()) {
      if (c.peers.basePort + 2LL * c.peers.count - 1 > 65535) {
        error(keyWhere("peers.base_port"), "peers.base_port",
              std::to_string(c.peers.basePort) + " + ports for " + std::to_string(c.peers.count) +
                  " peers passes 65535");
      }
    } else {
      std::map<std::pair<std::string, int>, int> first;
      for (size_t r = 0; r < c.peers.list.size(); ++r) {
        auto [it, ok] =
            first.emplace(std::make_pair(c.peers.list[r].host, c.peers.list[r].port), r);
        if (!ok) {
          error(keyWhere("peers.list"), "peers.list",
                "peers " + std::to_string(it->second) + " and " + std::to_string(r) +
                    " have the same address " + c.peers.list[r].host + ":" +
                    std::to_string(c.peers.list[r].port));
        }
      }
    }
    checkEphemeralPorts();
    checkHosts();
    checkMonitoringPorts(c);
    // A rendezvous publishes addresses that a list would fix in advance: two sources of truth.
    if (!c.peers.rendezvous.empty() && !c.peers.list.empty()) {
      error(keyWhere("peers.rendezvous"), "peers.rendezvous",
            "cannot be combined with an explicit peers list: the list already gives every "
            "address; use one or the other");
    }
    // `auto` is each machine's own name: only a rendezvous tells the other peers what it became.
    if (c.peers.host == "auto" && c.peers.rendezvous.empty() && c.peers.list.empty()) {
      error(keyWhere("peers.host"), "peers.host",
            "`auto` (this machine's address) needs peers.rendezvous: without it the other peers "
            "cannot learn the address");
    }
    if (c.peers.deadAfter <= c.peers.heartbeatInterval) {
      error(keyWhere("peers.dead_after"), "peers.dead_after",
            "must be longer than peers.heartbeat_interval (" +
                std::to_string(c.peers.heartbeatInterval) + " s)");
    }

    // network overrides name existing peers
    for (const auto& pn : c.network.peers) {
      if (pn.rank >= c.peers.count) {
        error(keyWhere("network.peers"), "network.peers",
              "rank " + std::to_string(pn.rank) + " is not a peer (peers.count is " +
                  std::to_string(c.peers.count) + ")");
      }
    }
    for (const auto& e : c.network.edges) {
      if (e.a >= c.peers.count || e.b >= c.peers.count) {
        error(keyWhere("network.edges"), "network.edges",
              "[" + std::to_string(e.a) + ", " + std::to_string(e.b) +
                  "] names a peer >= peers.count (" + std::to_string(c.peers.count) + ")");
      }
    }

    // topology
    const int n = c.peers.count;
    using topology::Kind;
    const Kind kind = c.topology.kind;
    const std::string kindText(topology::kindName(kind));
    bool dimsReported = false;
    if (kind == Kind::kTorus && !wasSet("topology.dims") && c.topology.dims.empty() && n >= 4) {
      // Unset dims: the squarest a x b = n with a >= 2 (16 -> 4x4, 64 -> 8x8, 32 -> 4x8), so a
      // sweep over peers.count needs no per-count dims.
      c.topology.dims = topology::squarestTorusDims(n);
      if (c.topology.dims.empty()) {
        error(keyWhere("topology.kind"), "topology.dims",
              "peers.count " + std::to_string(n) +
                  " has no a x b factorisation with a, b >= 2: give dims");
        dimsReported = true;
      }
    }
    if (kind == Kind::kTorus && !dimsReported) {
      if (c.topology.dims.size() != 2 && c.topology.dims.size() != 3) {
        error(wasSet("topology.dims") ? keyWhere("topology.dims") : keyWhere("topology.kind"),
              "topology.dims", "torus needs 2 or 3 sizes, e.g. dims: [4, 4]");
      } else {
        long long prod = 1;
        for (int d : c.topology.dims) prod *= d;
        if (prod != n) {
          error(keyWhere("topology.dims"), "topology.dims",
                "sizes multiply to " + std::to_string(prod) + " but peers.count is " +
                    std::to_string(n));
        }
      }
    } else if (wasSet("topology.dims") && !c.topology.dims.empty()) {
      warning(keyWhere("topology.dims"), "topology.dims", "ignored: topology.kind is " + kindText);
    }
    if (kind == Kind::kRandomRegular &&
        (c.topology.degree >= n || (1LL * n * c.topology.degree) % 2 != 0)) {
      error(keyWhere("topology.degree"), "topology.degree",
            "a random " + std::to_string(c.topology.degree) + "-regular graph on " +
                std::to_string(n) + " peers needs degree < peers and peers x degree even");
    }
    if (kind == Kind::kEdges) {
      if (c.topology.edges.empty()) {
        error(keyWhere("topology.kind"), "topology.edges",
              "kind edges needs a non-empty edge list");
      }
      std::set<std::pair<int, int>> seenEdges;
      for (const auto& e : c.topology.edges) {
        const std::string name = "[" + std::to_string(e.a) + ", " + std::to_string(e.b) + "]";
        if (e.a >= n || e.b >= n) {
          error(keyWhere("topology.edges"), "topology.edges",
                "edge " + name + " names a peer >= peers.count (" + std::to_string(n) + ")");
        } else if (e.a == e.b) {
          error(keyWhere("topology.edges"), "topology.edges", "edge " + name + " is a self loop");
        } else if (!seenEdges
                        .insert(c.topology.directed
                                    ? std::make_pair(e.a, e.b)
                                    : std::make_pair(std::min(e.a, e.b), std::max(e.a, e.b)))
                        .second) {
          error(keyWhere("topology.edges"), "topology.edges", "edge " + name + " is listed twice");
        }
      }
    } else if (wasSet("topology.edges")) {
      warning(keyWhere("topology.edges"), "topology.edges",
              "ignored: topology.kind is " + kindText);
    }
    if (c.topology.directed && kind != Kind::kEdges) {
      error(keyWhere("topology.directed"), "topology.directed",
            "true needs topology.kind: edges (the edge list says who sends to whom); "
            "topology.kind is " +
                kindText);
    }
    if (c.topology.directed && c.topology.weights == topology::WeightsKind::kExplicit) {
      error(keyWhere("topology.weights"), "topology.weights",
            "explicit weights cannot be used with topology.directed: true (push-sum weighs its "
            "shares 1/(out_degree + 1)); use metropolis or uniform");
    }
    if (c.topology.weights == topology::WeightsKind::kExplicit && kind != Kind::kEdges) {
      error(keyWhere("topology.weights"), "topology.weights",
            "explicit weights need kind: edges with [a, b, weight] entries");
    }
    if (errors() == 0 && options_.checkTopology) {
      auto schedule = topology::makeSchedule(c.topologySpec());
      if (!schedule.isOk()) {
        error(keyWhere("topology.kind"), "topology", schedule.status().message());
      } else {
        const auto& g = (*schedule)->graph(0);
        const auto& w = (*schedule)->weights(0);
        const auto checks = topology::check(g, w);
        if ((*schedule)->period() == 1 && !checks.connected) {
          error(keyWhere("topology.kind"), "topology",
                "the graph is disconnected: some peers can never agree");
        }
        if (c.topology.directed) {
          checkDirected(c, **schedule);
        } else if (!checks.nonNegative || !checks.doublyStochastic) {
          error(keyWhere("topology.weights"), "topology.weights",
                "the mixing weights are not a doubly stochastic non-negative matrix "
                "(rows and columns must sum to 1)");
        }
      }
    }

    checkSecurity(c);

    // algorithm, compression, optimizer, workload
    const bool dsgd = c.algorithm.name == algorithms::AlgorithmKind::kDsgd;
    if (dsgd && c.compression.method != compress::Method::kNone) {
      error(keyWhere("compression.method"), "compression.method",
            "dsgd exchanges full models uncompressed; use algorithm.name: choco or deepsqueeze "
            "with " +
                std::string(compress::methodName(c.compression.method)));
    }
    // Error feedback (a per-sender residual e added to the next delta) helps an algorithm that
    // would otherwise lose the compression error. CHOCO and DeepSqueeze never lose it, so a second
    // residual feeds the same error back twice and the models run away (sim, 8-peer ring MLP, sign,
    // step 0.4, 300 rounds: CHOCO 85% -> 17% with it, DeepSqueeze 81% -> 11%). docs/algorithms.md
    // lists which option each algorithm uses.
    const bool pushSum = c.algorithm.name == algorithms::AlgorithmKind::kPushSum;
    checkPushSum(c);
    checkFaults(c);
    if (c.compression.errorFeedback && !dsgd && !pushSum) {
      const bool choco = c.algorithm.name == algorithms::AlgorithmKind::kChoco;
      error(keyWhere("compression.error_feedback"), "compression.error_feedback",
            std::string("true cannot be used with algorithm.name: ") +
                std::string(algorithms::algorithmKindName(c.algorithm.name)) + ": " +
                (choco ? "CHOCO's public copies already carry the compression residual (each "
                         "round sends C(x - x_hat), the part not yet delivered)"
                 : c.algorithm.name == algorithms::AlgorithmKind::kGt
                     ? "gt's public copies of x and y already carry the compression residual "
                       "(each round sends C(x - x_hat) and C(y - y_hat))"
                     : "DeepSqueeze already feeds its compression error back (e <- v - C(v))") +
                ", so a second residual counts it twice and diverges; set "
                "compression.error_feedback: false");
    }
    if (c.compression.errorFeedback && dsgd && c.compression.method == compress::Method::kNone) {
      warning(keyWhere("compression.error_feedback"), "compression.error_feedback",
              "has no effect: dsgd sends exact fp32 models, there is no residual");
    }
    // gt is the exception: uncompressed it mixes with (I + W) / 2 under auto, on purpose
    // (algorithm.h, kGtAutoStepUncompressed).
    if (!dsgd && !pushSum && c.algorithm.name != algorithms::AlgorithmKind::kGt &&
        c.compression.method == compress::Method::kNone && c.algorithm.consensusStep &&
        *c.algorithm.consensusStep < 1.0) {
      warning(keyWhere("algorithm.consensus_step"), "algorithm.consensus_step",
              "below 1 without compression slows consensus for nothing");
    }
    if (c.algorithm.name == algorithms::AlgorithmKind::kGt) {
      // The tracker adds d_t - d_{t-1} once per round: with H local steps it would either see
      // only the last step's direction or count the round's changes H times.
      if (c.algorithm.localSteps != 1) {
        error(keyWhere("algorithm.local_steps"), "algorithm.local_steps",
              "must be 1 with algorithm.name: gt (the tracker takes one gradient per gossip "
              "round)");
      }
      // The API's caller takes its own optimizer step; gt must choose the step direction.
      if (c.workload.name == train::WorkloadKind::kExternal) {
        error(keyWhere("algorithm.name"), "algorithm.name",
              "gt cannot be used with workload.name external: gradient tracking replaces the "
              "step direction, and through the API the caller takes its own step");
      }
      // gt on a directed graph is refused by checkDirected() (symmetric weights needed).
    }
    if (c.optimizer.schedule == train::LrScheduleKind::kStep &&
        c.optimizer.stepMilestones.empty()) {
      error(keyWhere("optimizer.schedule"), "optimizer.step_milestones",
            "the step schedule needs milestones, e.g. step_milestones: [1000, 2000]");
    }
    if (c.optimizer.nesterov && c.optimizer.momentum == 0.0 && wasSet("optimizer.nesterov")) {
      warning(keyWhere("optimizer.nesterov"), "optimizer.nesterov",
              "has no effect with momentum 0");
    }
    if (c.workload.name == train::WorkloadKind::kExternal && c.algorithm.localSteps != 1) {
      error(keyWhere("algorithm.local_steps"), "algorithm.local_steps",
            "must be 1 with workload.name external: every step() through the API is one round "
            "(take extra local steps with your own optimizer and call mix())");
    }
    if (c.workload.name == train::WorkloadKind::kExternal && c.checkpoint.every > 0) {
      error(keyWhere("checkpoint.every"), "checkpoint.every",
            "is for `grapevine peer`/`launch` (--resume); with workload.name external your program "
            "owns its model and optimizer: checkpoint them with the API's state()/load_state()");
    }
    if (c.workload.name == train::WorkloadKind::kQuadratic) {
      if (c.workload.data.empty()) {
        error(keyWhere("workload.name"), "workload.data",
              "the quadratic workload needs a data file");
      } else if (!std::ifstream(resolve(c.workload.data))) {
        error(keyWhere("workload.data"), "workload.data",
              "cannot open \"" + c.workload.data + "\"");
      }
    }
  }

  // security.*: the key file must be usable (so a peer refuses it at start, naming it); without
  // one, traffic that leaves this machine is open to anyone who reaches the ports: warned.
  void checkSecurity(const Config& c) {
    if (!c.security.keyFile.empty()) {
      auto key = security::readKeyFile(c.keyFilePath());
      if (!key.isOk())
        error(keyWhere("security.key_file"), "security.key_file", key.status().message());
    } else if (c.security.encrypt) {
      error(keyWhere("security.encrypt"), "security.encrypt",
            "true needs security.key_file (the key that encrypts): create one with grapevine "
            "keygen -o FILE");
    } else if (c.anyNonLoopbackHost()) {
      warning(keyWhere("security.key_file"), "security.key_file",
              "not set while peers use non-loopback addresses: anyone who reaches the ports can "
              "join the run or forge messages; create a key with grapevine keygen -o FILE "
              "(docs/security.md)");
    }
  }

  // Paths in a config are relative to the config file's folder.
  std::string resolve(const std::string& path) const {
    if (path.empty() || path[0] == '/') return path;
    const auto slash = file_.rfind('/');
    return slash == std::string::npos ? path : file_.substr(0, slash + 1) + path;
  }

  static constexpr int kMaxNodes = 1 << 20;
  const LoadOptions& options_;
  std::string file_;
  LoadResult result_;
  std::map<std::string, Where> seen_;
  int visited_ = 0;
};

int editDistance(std::string_view a, std::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

bool LoadResult::ok() const {
  return std::none_of(diagnostics.begin(), diagnostics.end(),
                      [](const Diagnostic& d) { return !d.warning; });
}

std::string suggestKey(std::string_view path) {
  std::string best;
  int bestDistance = 4;
  std::set<std::string> candidates;
  for (const auto& k : schema()) {
    candidates.insert(k.path);
    candidates.insert(k.path.substr(0, k.path.find('.')));
  }
  for (const auto& cand : candidates) {
    const int d = editDistance(path, cand);
    if (d < bestDistance) {
      bestDistance = d;
      best = cand;
    }
  }
  // "topology.kidn" -> compare the last component within the same section too.
  return best;
}

LoadResult loadString(std::string_view text, const std::string& displayName,
                      const LoadOptions& options) {
  Loader loader(options, displayName);
  return loader.run(text);
}

LoadResult loadFile(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadResult r;
    r.diagnostics.push_back({path, 0, 0, "", "cannot open the file", false});
    return r;
  }
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::size_t>(std::max<std::streamoff>(0, in.tellg()));
  if (size > options.maxFileBytes) {
    LoadResult r;
    r.diagnostics.push_back({path, 0, 0, "",
                             "file is " + std::to_string(size) + " bytes; the limit is " +
                                 std::to_string(options.maxFileBytes),
                             false});
    return r;
  }
  in.seekg(0);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  return loadString(text, path, options);
}

std::string toYaml(const Config& config) {
  std::ostringstream os;
  std::string section;
  for (const auto& k : schema()) {
    const auto dot = k.path.find('.');
    const std::string s = k.path.substr(0, dot);
    if (s != section) {
      os << s << ":\n";
      section = s;
    }
    if (k.path == "peers.list" && config.peers.list.empty()) continue;
    if (k.path == "topology.edges" && config.topology.edges.empty()) continue;
    if (k.path == "topology.seed" && !config.topology.seed) continue;
    os << "  " << k.path.substr(dot + 1) << ": " << k.show(config) << "\n";
  }
  return os.str();
}

}  // namespace grapevine::config
