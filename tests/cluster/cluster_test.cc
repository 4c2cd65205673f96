// Peers started by the cluster tools users already have, as the README shows them:
//   * a single-node Slurm cluster from Debian's packages (munged, slurmctld, slurmd; a generated
//     slurm.conf in a scratch folder, the node's real CPU count, AuthType=auth/munge with a key of
//     its own) runs `srun -n 8 grapevine peer examples/slurm/ring8.yaml` and
//     `sbatch examples/slurm/ring8.sbatch`;
//   * Open MPI runs `mpirun -np 4 grapevine peer ...`.
// No --rank anywhere: every rank comes from SLURM_PROCID / OMPI_COMM_WORLD_RANK, and every address
// through peers.rendezvous (host: auto). Each run must finish on every peer, `grapevine summarize`
// must write a valid summary, and the launcher's task numbers must be the peers' ranks. Everything
// started here is stopped again, on failure paths too (the cluster's destructor), and the cases
// check that no process of theirs is left.
//
// Authentication is munge, as on real clusters: munged runs in the foreground with a key and socket
// of its own (AuthInfo=socket=...), so a system munged, if any, is neither needed nor touched.
// (Slurm 22.05 still ships auth/none, but it is gone from later releases and accepts anyone.)
//
// The daemons run as root (SlurmUser=root): tools/test runs as root in CI. Without root, or without
// the packages (tools/install-deps installs them), the Slurm case is skipped, visibly.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/subprocess.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/skip.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using grapevine::ChildStream;
using grapevine::SpawnOptions;
using grapevine::Subprocess;
using grapevine::test_util::freeBasePort;
using grapevine::test_util::freshDir;
using grapevine::test_util::grapevineBin;

const std::string kSource = GRAPEVINE_SOURCE_DIR;
const std::string kConfig = "examples/slurm/ring8.yaml";  // relative to kSource, as users type it

using grapevine::test_util::readFile;

bool onPath(const std::string& program) {
  return std::system(("command -v " + program + " > /dev/null 2>&1").c_str()) == 0;
}

// Runs `cmd` with /bin/sh in `cwd`, stdout and stderr into `log`; the exit code, or nullopt when it
// did not exit before `seconds` passed (a failure guard only: then it is killed).
std::optional<int> runIn(const std::string& cwd, const std::string& cmd, const std::string& log,
                         double seconds) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "cd '" + cwd + "' && " + cmd};
  o.out = ChildStream::file(log);
  o.err = ChildStream::sameAsStdout();
  auto child = Subprocess::spawn(o);
  REQUIRE(child.isOk());
  auto st = child->waitUntil(Clock::now() + std::chrono::milliseconds(long(seconds * 1000)));
  if (!st.isOk()) {
    child->kill();
    return std::nullopt;
  }
  return grapevine::exitCode(*st);
}

// `cmd`'s stdout (stderr discarded).
std::string capture(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

// Processes (other than this one) whose command line mentions `needle`: what a case left running.
std::vector<std::string> processesMentioning(const std::string& needle) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::stol(pid) == getpid()) continue;
    std::string cmdline = readFile(e.path().string() + "/cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(needle) != std::string::npos) found.push_back(pid + ": " + cmdline);
  }
  return found;
}

// A run of examples/slurm/ring8.yaml with `peers` peers in `dir`: every peer finished all rounds,
// its final file names its own rank, its records end with the final one, it published its address
// (port basePort + rank) in the rendezvous folder, and `grapevine summarize` writes a summary that
// agrees.
void checkRun(const std::string& dir, int peers, const std::string& rendezvous, int basePort) {
  for (int r = 0; r < peers; ++r) {
    INFO("peer " << r << " in " << dir);
    const std::string final = dir + "/peer-" + std::to_string(r) + ".final.json";
    REQUIRE(fs::exists(final));
    const auto j = nlohmann::json::parse(readFile(final));
    CHECK(j["rank"] == r);
    CHECK(j["finished"] == true);
    CHECK(j["rounds"] == 300);
    // The records end with the final one.
    std::istringstream records(readFile(dir + "/peer-" + std::to_string(r) + ".jsonl"));
    std::string line, last;
    while (std::getline(records, line))
      if (!line.empty()) last = line;
    const auto lastRecord = nlohmann::json::parse(last, nullptr, false);
    REQUIRE(lastRecord.is_object());
    CHECK(lastRecord.value("final", false));
    // host:port, with the port the config gives rank r.
    const std::string address = readFile(rendezvous + "/rank-" + std::to_string(r));
    CHECK(std::regex_match(address, std::regex(R"([0-9.]+:[0-9]+\n)")));
    CHECK(address.ends_with(":" + std::to_string(basePort + r) + "\n"));
  }
  CHECK_FALSE(fs::exists(dir + "/peer-" + std::to_string(peers) + ".final.json"));
  const std::string log = dir + ".summarize.log";
  const auto rc = runIn(kSource,
                        grapevineBin() + " summarize " + kConfig + " " + dir +
                            " --set peers.count=" + std::to_string(peers),
                        log, 120);
  INFO(readFile(log));
  REQUIRE(rc == 0);
  const auto s = grapevine::test_util::readSummary(dir);
  INFO(s.dump(2));
  CHECK(s["peers_finished"] == peers);
  CHECK(s["rounds"] == 300);
  CHECK(s["transport"] == "tcp");
  CHECK(s["diverged"] == false);
  // The consensus workload starts every peer at its own random vector: gossip must have pulled the
  // peers together (a run without exchanges would leave them far apart).
  CHECK(s["consensus_distance_final"].get<double>() < 0.1);
}

// Log lines "<task>: ... peer <rank> ..." (srun --label) or "[1,<task>]<stdout>: ... peer <rank>"
// (mpirun --tag-output): every task that logged a rank logged its own, and all `peers` did.
void checkRanksAreTasks(const std::string& log, const std::regex& line, int peers) {
  std::set<int> tasks;
  std::istringstream in(readFile(log));
  std::string text;
  int mismatches = 0;
  while (std::getline(in, text)) {
    std::smatch m;
    if (!std::regex_search(text, m, line)) continue;
    tasks.insert(std::stoi(m[1]));
    if (m[1] != m[2]) {
      ++mismatches;
      UNSCOPED_INFO("task " << m[1] << " logged as peer " << m[2] << ": " << text);
    }
  }
  INFO(readFile(log));
  CHECK(mismatches == 0);
  CHECK(static_cast<int>(tasks.size()) == peers);
}

// munged, slurmctld and slurmd of a one-node cluster, their files in `dir` (munged's in /tmp). The
// daemons die with this process (PR_SET_PDEATHSIG) if it is killed; the destructor cancels every
// job and stops them.
class SlurmCluster {
 public:
  SlurmCluster(std::string dir, int ctldPort) : dir_(std::move(dir)) {
    conf_ = dir_ + "/slurm.conf";
    // munged refuses a socket whose folder, or any folder above it, others cannot traverse (a
    // build tree under /root would do), and a key others can read: its files go to /tmp.
    char munge[] = "/tmp/grapevine-munge-XXXXXX";
    REQUIRE(mkdtemp(munge) != nullptr);
    munge_ = munge;
    fs::permissions(munge_, fs::perms(0755));
    writeConfig(ctldPort);
  }
  ~SlurmCluster() {
    stop();
    std::error_code ec;
    fs::remove_all(munge_, ec);
  }

  const std::string& mungeDir() const { return munge_; }

  // "SLURM_CONF=... " for commands run against this cluster.
  std::string env() const { return "SLURM_CONF='" + conf_ + "' "; }

  void start() {
    {
      std::ofstream key(munge_ + "/munge.key", std::ios::binary);
      std::ifstream random("/dev/urandom", std::ios::binary);
      char bytes[1024];
      random.read(bytes, sizeof bytes);
      key.write(bytes, sizeof bytes);
    }
    fs::permissions(munge_ + "/munge.key", fs::perms::owner_read);
    munged_ =
        spawn({"munged", "--foreground", "--socket=" + munge_ + "/munge.socket",
               "--key-file=" + munge_ + "/munge.key", "--pid-file=" + munge_ + "/munged.pid",
               "--log-file=" + munge_ + "/munged.log", "--seed-file=" + munge_ + "/munged.seed"},
              "munged.out");
    // munged is up once a credential round-trips through its socket.
    waitFor("munged to answer", [&] {
      return std::system(("munge -n -S " + munge_ + "/munge.socket 2>/dev/null | unmunge -S " +
                          munge_ + "/munge.socket > /dev/null 2>&1")
                             .c_str()) == 0;
    });
    slurmctld_ = spawn({"slurmctld", "-D", "-f", conf_}, "slurmctld.out");
    slurmd_ = spawn({"slurmd", "-D", "-f", conf_}, "slurmd.out");
    waitFor("the node to be idle in sinfo",
            [&] { return capture(env() + "sinfo -h -N -o %T 2>/dev/null") == "idle\n"; });
  }

  // Cancels every job and waits for the queue to drain, then stops slurmd, slurmctld and munged.
  void stop() {
    if (slurmctld_.running()) {
      std::system((env() + "scancel --quiet --partition=debug > /dev/null 2>&1").c_str());
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      while (Clock::now() < deadline && !capture(env() + "squeue -h -o %i 2>/dev/null").empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    for (Subprocess* p : {&slurmd_, &slurmctld_, &munged_}) {
      if (!p->running()) continue;
      p->signal(SIGTERM);
      if (!p->waitUntil(Clock::now() + std::chrono::seconds(30)).isOk()) p->kill();
    }
  }

  std::string logs() const {
    std::string text;
    for (const char* f :
         {"slurmctld.log", "slurmd.log", "munged.out", "slurmctld.out", "slurmd.out"})
      text += std::string("--- ") + f + "\n" + readFile(dir_ + "/" + f);
    return text + "--- munged.log\n" + readFile(munge_ + "/munged.log");
  }

 private:
  void writeConfig(int ctldPort) {
    // The node as slurmd sees it ("NodeName=vm CPUs=2 Boards=1 ... RealMemory=..."), first line.
    std::string node = capture("slurmd -C 2>/dev/null");
    node = node.substr(0, node.find('\n'));
    REQUIRE(node.rfind("NodeName=", 0) == 0);
    const std::string name = node.substr(9, node.find(' ') - 9);
    std::ofstream(conf_) << "ClusterName=grapevine-test\n"
                         << "SlurmctldHost=" << name << "(127.0.0.1)\n"
                         << "SlurmctldPort=" << ctldPort << "\n"
                         << "SlurmdPort=" << ctldPort + 1 << "\n"
                         << "SlurmUser=root\nSlurmdUser=root\n"
                         << "AuthType=auth/munge\nCredType=cred/munge\n"
                         << "AuthInfo=socket=" << munge_ << "/munge.socket\n"
                         << "StateSaveLocation=" << dir_ << "/state\n"
                         << "SlurmdSpoolDir=" << dir_ << "/spool\n"
                         << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\n"
                         << "SlurmdPidFile=" << dir_ << "/slurmd.pid\n"
                         << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\n"
                         << "SlurmdLogFile=" << dir_
                         << "/slurmd.log\n"
                         // No cgroups (containers, CI): processes tracked through /proc.
                         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                         << "JobAcctGatherType=jobacct_gather/none\n"
                         << "AccountingStorageType=accounting_storage/none\n"
                         << "MpiDefault=none\nReturnToService=2\nKillWait=5\n"
                         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
                         << node << " NodeAddr=127.0.0.1 State=UNKNOWN\n"
                         << "PartitionName=debug Nodes=" << name
                         << " Default=YES MaxTime=INFINITE State=UP\n";
    fs::create_directories(dir_ + "/state");
    fs::create_directories(dir_ + "/spool");
  }

  Subprocess spawn(std::vector<std::string> argv, const std::string& out) {
    SpawnOptions o;
    o.argv = std::move(argv);
    o.setEnv = {{"SLURM_CONF", conf_}};
    o.out = ChildStream::file(dir_ + "/" + out);
    o.err = ChildStream::sameAsStdout();
    o.beforeExec = [] { prctl(PR_SET_PDEATHSIG, SIGKILL); };
    auto p = Subprocess::spawn(o);
    REQUIRE(p.isOk());
    return std::move(*p);
  }

  // Polls `ready` until it holds; fails (with the logs) if a daemon exits first, or after a
  // generous deadline that only guards against a hang.
  template <typename Ready>
  void waitFor(const std::string& what, Ready ready) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!ready()) {
      for (Subprocess* p : {&munged_, &slurmctld_, &slurmd_}) {
        if (p->pid() > 0 && p->poll())
          FAIL("a daemon exited while waiting for " << what << "\n" << logs());
      }
      if (Clock::now() > deadline) FAIL("timed out waiting for " << what << "\n" << logs());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  std::string dir_, conf_, munge_;
  Subprocess munged_, slurmctld_, slurmd_;
};

}  // namespace

TEST_CASE("Slurm: srun -n 8 and sbatch of examples/slurm/ring8.sbatch run every peer", "[slurm]") {
  for (const char* tool : {"munged", "slurmctld", "slurmd", "srun", "sbatch"}) {
    if (!onPath(tool))
      GV_SKIP_MISSING("slurm", tool << " is not installed (tools/install-deps installs Slurm)");
  }
  if (geteuid() != 0)
    GV_SKIP_MISSING("root", "the test cluster runs its daemons as root (SlurmUser=root)");
  const std::string dir = freshDir("cluster_test_slurm");
  // slurmctld, slurmd, then the 8 peers' control ports.
  const int base = freeBasePort(10);
  const std::string peersEnv = "GRAPEVINE_PEERS_BASE_PORT=" + std::to_string(base + 2) + " ";
  std::string mungeDir;
  {
    SlurmCluster cluster(dir, base);
    cluster.start();

    // srun, as a user types it on a login node (--overcommit: 8 tasks on fewer CPUs here).
    const std::string out = dir + "/srun";
    const std::string srunLog = dir + "/srun.log";
    auto rc = runIn(kSource,
                    cluster.env() + peersEnv + "srun --label -n 8 --overcommit " + grapevineBin() +
                        " peer " + kConfig + " --out " + out + " --set peers.rendezvous=" + out +
                        "/rendezvous",
                    srunLog, 300);
    INFO(readFile(srunLog) << cluster.logs());
    REQUIRE(rc == 0);
    checkRun(out, 8, out + "/rendezvous", base + 2);
    checkRanksAreTasks(srunLog, std::regex(R"(^\s*(\d+): .*?\bpeer (\d+)\b)"), 8);

    // sbatch of the shipped script, waited for (--wait returns when the job ended, with its exit
    // code). Its output folder is RUNS/slurm-ring8-<job id>.
    const std::string runs = dir + "/sbatch";
    fs::create_directories(runs);
    const std::string sbatchLog = dir + "/sbatch.log";
    rc = runIn(kSource,
               cluster.env() + peersEnv + "GRAPEVINE=" + grapevineBin() + " RUNS=" + runs +
                   " sbatch --wait --overcommit --output=" + runs +
                   "/job-%j.log examples/slurm/ring8.sbatch",
               sbatchLog, 300);
    std::string jobLogs;
    std::string jobOut;
    for (const auto& e : fs::directory_iterator(runs)) {
      const std::string name = e.path().filename();
      if (name.rfind("job-", 0) == 0) jobLogs += readFile(e.path());
      if (name.rfind("slurm-ring8-", 0) == 0) jobOut = e.path();
    }
    INFO(readFile(sbatchLog) << jobLogs << cluster.logs());
    REQUIRE(rc == 0);
    REQUIRE_FALSE(jobOut.empty());
    checkRun(jobOut, 8, jobOut + "/rendezvous", base + 2);
    // The script's own `grapevine summarize` ran too: its table is in the job's log.
    CHECK(jobLogs.find("summary: " + jobOut + "/summary.json") != std::string::npos);
    cluster.stop();
    mungeDir = cluster.mungeDir();
  }
  auto left = processesMentioning(dir);
  REQUIRE_FALSE(mungeDir.empty());
  for (const auto& p : processesMentioning(mungeDir)) left.push_back(p);
  INFO("left running:\n"
       << [&] {
            std::string s;
            for (const auto& p : left) s += p + "\n";
            return s;
          }());
  CHECK(left.empty());
}

TEST_CASE("Open MPI: mpirun -np 4 runs every peer, ranks from OMPI_COMM_WORLD_RANK", "[mpi]") {
  if (!onPath("mpirun"))
    GV_SKIP_MISSING("mpi", "mpirun is not installed (tools/install-deps installs openmpi-bin)");
  const std::string dir = freshDir("cluster_test_mpi");
  const std::string out = dir + "/mpirun";
  const std::string log = dir + "/mpirun.log";
  const int base = freeBasePort(4);
  // As root (CI) Open MPI wants --allow-run-as-root; --oversubscribe: 4 ranks on fewer cores here.
  const auto rc = runIn(kSource,
                        "GRAPEVINE_PEERS_BASE_PORT=" + std::to_string(base) +
                            " mpirun -np 4 --oversubscribe --allow-run-as-root --tag-output " +
                            grapevineBin() + " peer " + kConfig + " --out " + out +
                            " --set peers.count=4 --set peers.rendezvous=" + out + "/rendezvous",
                        log, 300);
  INFO(readFile(log));
  REQUIRE(rc == 0);
  checkRun(out, 4, out + "/rendezvous", base);
  checkRanksAreTasks(log, std::regex(R"(^\[\d+,(\d+)\]<std...>:.*?\bpeer (\d+)\b)"), 4);
  CHECK(processesMentioning(out).empty());
}
