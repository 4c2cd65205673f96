// libFuzzer target: the C API's input parsing (include/grapevine/grapevine.h, runtime/api/): the
// options a program hands in (the config text, "key=value" overrides, a rank), the peer built from
// them (grapevine_peer_create: the YAML loader, the API's own checks, the run plan), the resolved
// config it prints back and the tensors registered. The Python module (python/src/module.cc) passes
// the same options to the same grapevine::Peer. c_api.cc and peer.cc are compiled into the harness
// (instrumented, linked statically with the engine) rather than loaded from libgrapevine.so.
// Nothing connects: start() is not called.
//
// Input: u8 rank | config text, then optionally a NUL and overrides, one per line, then
// optionally a NUL and tensor registrations, one per line ("name count": the digits after the last
// space, mod 4096). The rank and the out dir (a folder that does not exist: nothing is written
// before start) are always set, so their environment variables are not read; an empty text makes
// the peer read GRAPEVINE_CONFIG, which the fuzz runs leave unset.
// Properties beyond "no crash, no sanitizer report, no exception through the C boundary": every
// status is one of grapevine_status's values, every failed call leaves a message in
// grapevine_last_error(); a peer that is created prints its resolved config as YAML from which a
// second peer (same rank, no overrides) is created and prints the same YAML; its rank is the one
// asked for and below its world size; the parameter count is the sum of the tensors accepted.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "grapevine/grapevine.h"

namespace {

const char* const kOutDir = "/nonexistent-grapevine-fuzz/out";

void checkStatus(grapevine_status s) {
  if (s < GRAPEVINE_OK || s > GRAPEVINE_INTERNAL) std::abort();
  if (s != GRAPEVINE_OK && grapevine_last_error()[0] == '\0') std::abort();
}

std::vector<std::string> lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    out.emplace_back(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  }
  return out;
}

// Creates a peer; nullptr (the status checked) when refused.
grapevine_peer* create(const std::string& yaml, const std::vector<std::string>& overrides,
                       int rank) {
  grapevine_options* o = nullptr;
  checkStatus(grapevine_options_create(&o));
  if (o == nullptr) std::abort();
  checkStatus(grapevine_options_set_config_text(o, yaml.c_str()));
  for (const auto& kv : overrides) checkStatus(grapevine_options_add_override(o, kv.c_str()));
  checkStatus(grapevine_options_set_rank(o, rank));
  checkStatus(grapevine_options_set_out_dir(o, kOutDir));
  grapevine_peer* peer = nullptr;
  const grapevine_status s = grapevine_peer_create(o, &peer);
  grapevine_options_destroy(o);
  checkStatus(s);
  if ((s == GRAPEVINE_OK) != (peer != nullptr)) std::abort();
  return peer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int rank = data[0] % 16;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::size_t cut1 = rest.find('\0');
  const std::string yaml(rest.substr(0, cut1));
  std::string_view tail = cut1 == std::string_view::npos ? "" : rest.substr(cut1 + 1);
  const std::size_t cut2 = tail.find('\0');
  const std::vector<std::string> overrides = lines(tail.substr(0, cut2));
  const std::vector<std::string> tensors =
      lines(cut2 == std::string_view::npos ? "" : tail.substr(cut2 + 1));

  grapevine_peer* peer = create(yaml, overrides, rank);
  if (peer == nullptr) return 0;

  int r = -1, world = 0;
  checkStatus(grapevine_peer_rank(peer, &r));
  checkStatus(grapevine_peer_world_size(peer, &world));
  if (r != rank || world <= rank) std::abort();
  std::int64_t rounds = -1;
  checkStatus(grapevine_peer_planned_rounds(peer, &rounds));
  const char* outDir = nullptr;
  checkStatus(grapevine_peer_out_dir(peer, &outDir));
  if (outDir == nullptr || std::strcmp(outDir, kOutDir) != 0) std::abort();
  const char* printed = nullptr;
  checkStatus(grapevine_peer_config_yaml(peer, &printed));
  if (printed == nullptr) std::abort();
  const std::string resolved = printed;

  // Tensors: "name count" lines; the memory outlives the peer.
  std::vector<std::vector<float>> memory;
  memory.reserve(tensors.size());
  std::size_t accepted = 0;
  for (const auto& t : tensors) {
    const std::size_t space = t.rfind(' ');
    const std::string name = t.substr(0, space);
    std::size_t count = 0;
    if (space != std::string::npos) {
      for (char ch : t.substr(space + 1)) {
        if (ch >= '0' && ch <= '9')
          count = (count * 10 + static_cast<std::size_t>(ch - '0')) % 4096;
      }
    }
    memory.emplace_back(count, 0.5f);
    const grapevine_status s =
        grapevine_peer_add_tensor(peer, name.c_str(), memory.back().data(), count);
    checkStatus(s);
    if (s == GRAPEVINE_OK) accepted += count;
  }
  std::size_t parameters = 0;
  checkStatus(grapevine_peer_parameter_count(peer, &parameters));
  if (parameters != accepted) std::abort();
  grapevine_peer_destroy(peer);

  // The resolved config is a config: it creates the same peer again.
  grapevine_peer* again = create(resolved, {}, rank);
  if (again == nullptr) std::abort();
  const char* reprinted = nullptr;
  checkStatus(grapevine_peer_config_yaml(again, &reprinted));
  if (reprinted == nullptr || resolved != reprinted) std::abort();
  grapevine_peer_destroy(again);
  return 0;
}
