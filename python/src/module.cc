// The Python binding of Grapevine's C++ API (include/grapevine/grapevine.hpp): the extension
// module `grapevine._grapevine`, wrapped by the pure-Python package python/grapevine/.
//
// What this layer adds to the C++ API, and why:
//   - grapevine::Error becomes a Python exception of a class chosen by its ErrorCode (the classes
//     are created here, at import, so the module needs no Python code to raise them);
//   - every call that may block (start, step, mix, the async halves, wait, finalize) releases the
//     GIL, so other Python threads (data loading, logging) run while a round is on the wire;
//   - tensors are numpy float32 arrays (the buffer protocol): the array objects are kept alive for
//     the Peer's lifetime, because the C++ Peer reads and writes their memory until finalize();
//   - bind() returns a numpy array over Grapevine's own buffer whose base is the Peer object, so
//     the Peer (and the buffer) outlive every view of it;
//   - a Peer may be used by one thread at a time (the C++ contract); with the GIL released that is
//     no longer enforced by Python, so a second concurrent call raises instead of racing.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grapevine/grapevine.hpp"

namespace py = pybind11;

namespace grapevine::python {
namespace {

// The error code type of Error::code() (spelled through the call, so this file does not depend on
// where the header declares it).
using ErrorCode = decltype(std::declval<const Error&>().code());

// The exception classes, by ErrorCode; created once at import (module init runs with the GIL).
struct ErrorClasses {
  py::object base;
  std::unordered_map<int, py::object> byCode;
};

ErrorClasses& errorClasses() {
  // Leaked on purpose: Python objects must not be released after the interpreter is finalized.
  static auto* classes = new ErrorClasses();
  return *classes;
}

const char* codeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kFailedPrecondition:
      return "failed_precondition";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kAborted:
      return "aborted";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

// Raises the Python exception for `e`: the class of its code (GrapevineError for an unknown code),
// with the message as its argument and `code` / `code_name` attributes.
void raiseError(const Error& e) {
  auto& classes = errorClasses();
  const auto it = classes.byCode.find(static_cast<int>(e.code()));
  const py::object& cls = it != classes.byCode.end() ? it->second : classes.base;
  py::object instance = cls(py::str(e.what()));
  instance.attr("code") = static_cast<int>(e.code());
  instance.attr("code_name") = codeName(e.code());
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

void defineErrors(py::module_& m) {
  auto& classes = errorClasses();
  const py::object type = py::module_::import("builtins").attr("type");
  auto make = [&](const char* name, py::tuple bases, const char* doc) {
    py::dict attrs;
    attrs["__doc__"] = doc;
    attrs["__module__"] = "grapevine";
    py::object cls = type(name, bases, attrs);
    m.attr(name) = cls;
    return cls;
  };
  const py::object exception = py::reinterpret_borrow<py::object>(PyExc_Exception);
  classes.base = make("GrapevineError", py::make_tuple(exception),
                      "Base class of every error Grapevine raises. Attributes: code (int, the C++ "
                      "grapevine::ErrorCode) and code_name (e.g. 'invalid_argument').");
  const py::object& base = classes.base;
  auto builtin = [](PyObject* e) { return py::reinterpret_borrow<py::object>(e); };
  classes.byCode[static_cast<int>(ErrorCode::kInvalidArgument)] =
      make("InvalidArgumentError", py::make_tuple(base, builtin(PyExc_ValueError)),
           "A bad config, override, tensor, rank or argument (also a ValueError).");
  classes.byCode[static_cast<int>(ErrorCode::kNotFound)] =
      make("NotFoundError", py::make_tuple(base, builtin(PyExc_LookupError)),
           "A file or tensor that does not exist (also a LookupError).");
  classes.byCode[static_cast<int>(ErrorCode::kFailedPrecondition)] =
      make("FailedPreconditionError", py::make_tuple(base, builtin(PyExc_RuntimeError)),
           "A call in the wrong state, e.g. step() before start() (also a RuntimeError).");
  classes.byCode[static_cast<int>(ErrorCode::kUnavailable)] =
      make("UnavailableError", py::make_tuple(base, builtin(PyExc_ConnectionError)),
           "The network: a bootstrap that failed, a port in use (also a ConnectionError).");
  classes.byCode[static_cast<int>(ErrorCode::kAborted)] =
      make("AbortedError", py::make_tuple(base),
           "Training diverged, here or at a peer that told us; the run is over.");
  classes.byCode[static_cast<int>(ErrorCode::kInternal)] =
      make("InternalError", py::make_tuple(base, builtin(PyExc_RuntimeError)),
           "A bug in Grapevine: please report it (also a RuntimeError).");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raiseError(e);
    }
  });
}

// A numpy array that holds float32 values contiguously and may be written: what a registered
// tensor must be. Refuses anything else with a message naming the tensor (no silent copies: a
// copy would detach the caller's tensor from the model).
py::array checkedTensor(const std::string& name, const py::handle& object, bool writable) {
  if (!py::isinstance<py::array>(object)) {
    throw py::type_error("tensor '" + name + "': expected a numpy array of float32, got " +
                         std::string(py::str(py::type::of(object).attr("__name__"))));
  }
  auto array = py::reinterpret_borrow<py::array>(object);
  if (!array.dtype().is(py::dtype::of<float>())) {
    throw Error(ErrorCode::kInvalidArgument, "tensor '" + name + "' has dtype " +
                                                 std::string(py::str(array.dtype())) +
                                                 "; Grapevine trains float32 (fp32) tensors only");
  }
  if (!(array.flags() & py::array::c_style)) {
    throw Error(ErrorCode::kInvalidArgument,
                "tensor '" + name + "' is not contiguous; pass a contiguous (C-order) array");
  }
  if (writable && !array.writeable()) {
    throw Error(ErrorCode::kInvalidArgument, "tensor '" + name + "' is read-only");
  }
  return array;
}

// grapevine::Peer plus what Python needs around it: the registered arrays (kept alive), their
// sizes (to check gradients), and the one-caller-at-a-time guard.
class PyPeer {
 public:
  explicit PyPeer(const Options& options) : peer_(std::make_unique<Peer>(options)) {}
  // ~Peer() finalizes an open run, which may wait on the neighbours (their last round): without
  // the GIL, so that another peer of this process (on another thread) can finish its round.
  // The arrays are released after the body, with the GIL held again.
  ~PyPeer() {
    if (_Py_IsFinalizing()) {
      peer_.reset();
      return;
    }
    py::gil_scoped_release release;
    peer_.reset();
  }
  PyPeer(const PyPeer&) = delete;
  PyPeer& operator=(const PyPeer&) = delete;

  Peer& peer() { return *peer_; }

  // Marks the Peer busy for the duration of one call; a concurrent call from another thread
  // (possible once the GIL is released) raises instead of entering the Peer twice.
  class Busy {
   public:
    explicit Busy(PyPeer& p) : flag_(p.busy_) {
      if (flag_.exchange(true)) {
        throw Error(ErrorCode::kFailedPrecondition,
                    "this Peer is already in a call from another thread (a Peer is used by one "
                    "thread at a time)");
      }
    }
    ~Busy() { flag_.store(false); }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    std::atomic<bool>& flag_;
  };

  void addTensor(const std::string& name, const py::handle& object, bool buffer = false) {
    py::array array = checkedTensor(name, object, /*writable=*/true);
    Busy busy(*this);
    if (buffer) {
      peer_->addBuffer(name, static_cast<float*>(array.mutable_data()),
                       static_cast<std::size_t>(array.size()));
    } else {
      peer_->addTensor(name, static_cast<float*>(array.mutable_data()),
                       static_cast<std::size_t>(array.size()));
    }
    names_.push_back(name);
    counts_.push_back(static_cast<std::size_t>(array.size()));
    arrays_.push_back(std::move(array));
  }

  // grads: a sequence with one entry per registered tensor (registration order): a float32
  // contiguous array of that tensor's size, or None (a zero gradient). `keep` holds the arrays
  // while the pointers are used (declare it before releasing the GIL, so it dies after).
  std::vector<const float*> gradients(const py::sequence& grads, std::vector<py::object>& keep) {
    if (grads.size() != counts_.size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "step() got " + std::to_string(grads.size()) + " gradients for " +
                      std::to_string(counts_.size()) + " registered tensors");
    }
    std::vector<const float*> out(counts_.size(), nullptr);
    for (std::size_t k = 0; k < counts_.size(); ++k) {
      py::object g = grads[k];
      if (g.is_none()) continue;
      py::array array = checkedTensor("gradient of " + names_[k], g, /*writable=*/false);
      if (static_cast<std::size_t>(array.size()) != counts_[k]) {
        throw Error(ErrorCode::kInvalidArgument, "the gradient of tensor '" + names_[k] + "' has " +
                                                     std::to_string(array.size()) +
                                                     " values, the tensor " +
                                                     std::to_string(counts_[k]));
      }
      out[k] = static_cast<const float*>(array.data());
      keep.push_back(std::move(array));
    }
    return out;
  }

  std::size_t tensorCount() const { return counts_.size(); }

  // The element count of registered tensor `name` (0 when none has that name).
  std::size_t countOf(const std::string& name) const {
    for (std::size_t k = 0; k < names_.size(); ++k) {
      if (names_[k] == name) return counts_[k];
    }
    return 0;
  }

 private:
  std::unique_ptr<Peer> peer_;
  std::vector<std::string> names_;
  std::vector<std::size_t> counts_;
  std::vector<py::array> arrays_;
  std::atomic<bool> busy_{false};
};

Options makeOptions(const std::string& configPath, const std::string& configText,
                    const std::vector<std::string>& overrides, int rank, const std::string& outDir,
                    std::uint32_t incarnation, bool resume, bool skipMissingGradients) {
  Options o;
  o.resume = resume;
  o.skipMissingGradients = skipMissingGradients;
  o.configPath = configPath;
  o.configText = configText;
  o.overrides = overrides;
  o.rank = rank;
  o.outDir = outDir;
  o.incarnation = incarnation;
  return o;
}

double lossValue(const py::object& loss) {
  return loss.is_none() ? Peer::kNoLoss : loss.cast<double>();
}

}  // namespace
}  // namespace grapevine::python

PYBIND11_MODULE(_grapevine, m) {
  using grapevine::Event;
  using grapevine::EventKind;
  using grapevine::Stats;
  using grapevine::python::PyPeer;
  using Busy = grapevine::python::PyPeer::Busy;

  m.doc() = "Grapevine's C++ API (include/grapevine/grapevine.hpp); use the `grapevine` package.";
  m.attr("API_VERSION") = GRAPEVINE_API_VERSION;
  grapevine::python::defineErrors(m);

  py::enum_<EventKind>(m, "EventKind", "What an Event reports.")
      .value("SUSPECT", EventKind::kSuspect, "a neighbour's message missed a round")
      .value("DEAD", EventKind::kDead, "a neighbour's edge was dropped (closed, crashed, silent)")
      .value("DIVERGED", EventKind::kDiverged, "training diverged: the run stops")
      .value("REVIVED", EventKind::kRevived,
             "a neighbour dropped for silence answers again: its edge is back");

  py::class_<Event>(m, "Event", "A neighbour suspect/dead or a divergence (Peer.poll_events()).")
      .def_readonly("kind", &Event::kind)
      .def_readonly("peer", &Event::peer)
      .def_readonly("round", &Event::round)
      .def_readonly("message", &Event::message)
      .def("__repr__", [](const Event& e) {
        return "Event(kind=" + std::string(py::str(py::cast(e.kind))) +
               ", peer=" + std::to_string(e.peer) + ", round=" + std::to_string(e.round) +
               ", message=" + std::string(py::repr(py::str(e.message))) + ")";
      });

  py::class_<Stats>(m, "Stats", "Counters of a Peer (Peer.stats()).")
      .def_readonly("rounds", &Stats::rounds)
      .def_readonly("bytes_sent", &Stats::bytesSent)
      .def_readonly("bytes_received", &Stats::bytesReceived)
      .def_readonly("bytes_dense_equivalent", &Stats::bytesDenseEquivalent)
      .def_readonly("dropped_frames", &Stats::droppedFrames)
      .def_readonly("suspect_rounds", &Stats::suspectRounds)
      .def_readonly("neighbours", &Stats::neighbours)
      .def_readonly("live_neighbours", &Stats::liveNeighbours)
      .def_readonly("consensus_step", &Stats::consensusStep)
      .def_readonly("lr", &Stats::lr)
      .def_readonly("loss", &Stats::loss)
      .def_readonly("last_checkpoint_round", &Stats::lastCheckpointRound)
      .def_readonly("resumed_from_round", &Stats::resumedFromRound)
      .def("as_dict", [](const Stats& s) {
        py::dict d;
        d["rounds"] = s.rounds;
        d["bytes_sent"] = s.bytesSent;
        d["bytes_received"] = s.bytesReceived;
        d["bytes_dense_equivalent"] = s.bytesDenseEquivalent;
        d["dropped_frames"] = s.droppedFrames;
        d["suspect_rounds"] = s.suspectRounds;
        d["neighbours"] = s.neighbours;
        d["live_neighbours"] = s.liveNeighbours;
        d["consensus_step"] = s.consensusStep;
        d["lr"] = s.lr;
        d["loss"] = s.loss;
        d["last_checkpoint_round"] = s.lastCheckpointRound;
        d["resumed_from_round"] = s.resumedFromRound;
        return d;
      });

  py::class_<PyPeer>(m, "Peer",
                     "One gossip-training peer (grapevine::Peer). Prefer grapevine.Peer, which "
                     "accepts a config dict and keyword overrides.")
      .def(py::init([](const std::string& configPath, const std::string& configText,
                       const std::vector<std::string>& overrides, int rank,
                       const std::string& outDir, std::uint32_t incarnation, bool resume,
                       bool skipMissingGradients) {
             return std::make_unique<PyPeer>(
                 grapevine::python::makeOptions(configPath, configText, overrides, rank, outDir,
                                                incarnation, resume, skipMissingGradients));
           }),
           py::arg("config_path") = "", py::arg("config_text") = "",
           py::arg("overrides") = std::vector<std::string>{}, py::arg("rank") = -1,
           py::arg("out_dir") = "", py::arg("incarnation") = 0, py::arg("resume") = false,
           py::arg("skip_missing_gradients") = false)
      .def_property_readonly("rank", [](PyPeer& p) { return p.peer().rank(); })
      .def_property_readonly("world_size", [](PyPeer& p) { return p.peer().worldSize(); })
      .def_property_readonly("planned_rounds", [](PyPeer& p) { return p.peer().plannedRounds(); })
      .def_property_readonly("out_dir", [](PyPeer& p) { return p.peer().outDir(); })
      .def_property_readonly("checkpoint_folder",
                             [](PyPeer& p) { return p.peer().checkpointFolder(); })
      .def_property_readonly("config_yaml", [](PyPeer& p) { return p.peer().configYaml(); })
      .def_property_readonly("parameter_count", [](PyPeer& p) { return p.peer().parameterCount(); })
      .def_property_readonly("tensor_count", &PyPeer::tensorCount)
      .def(
          "add_tensor",
          [](PyPeer& p, const std::string& name, const py::handle& array) {
            p.addTensor(name, array);
          },
          py::arg("name"), py::arg("array"),
          "Registers a float32, contiguous, writable numpy array; it is kept alive by the Peer.")
      .def(
          "add_buffer",
          [](PyPeer& p, const std::string& name, const py::handle& array) {
            p.addTensor(name, array, /*buffer=*/true);
          },
          py::arg("name"), py::arg("array"),
          "Registers a buffer (e.g. BatchNorm running statistics): mixed and averaged like the "
          "tensors, never stepped; its entry in step()'s gradients is ignored (pass None).")
      .def(
          "start",
          [](PyPeer& p) {
            Busy busy(p);
            py::gil_scoped_release release;
            p.peer().start();
          },
          "Connects to the neighbours (blocks); every peer then holds the lowest rank's values.")
      .def(
          "bind",
          [](py::object self, const std::string& name) {
            auto& p = self.cast<PyPeer&>();
            float* data = nullptr;
            {
              Busy busy(p);
              data = p.peer().bind(name);
            }
            // bind() succeeded, so `name` was registered.
            const std::size_t count = p.countOf(name);
            // The view's base is the Peer: the buffer lives as long as any view of it.
            return py::array_t<float>({static_cast<py::ssize_t>(count)}, {sizeof(float)}, data,
                                      self);
          },
          py::arg("name"),
          "Moves tensor `name` into Grapevine's buffer and returns a float32 array viewing it.")
      .def(
          "step",
          [](PyPeer& p, const py::sequence& grads, const py::object& loss) {
            Busy busy(p);
            std::vector<py::object> keep;
            const auto pointers = p.gradients(grads, keep);
            const double l = grapevine::python::lossValue(loss);
            py::gil_scoped_release release;
            p.peer().step(pointers, l);
          },
          py::arg("grads"), py::arg("loss") = py::none())
      .def(
          "mix",
          [](PyPeer& p, const py::object& loss) {
            Busy busy(p);
            const double l = grapevine::python::lossValue(loss);
            py::gil_scoped_release release;
            p.peer().mix(l);
          },
          py::arg("loss") = py::none())
      .def(
          "start_step",
          [](PyPeer& p, const py::sequence& grads, const py::object& loss) {
            Busy busy(p);
            std::vector<py::object> keep;
            const auto pointers = p.gradients(grads, keep);
            const double l = grapevine::python::lossValue(loss);
            py::gil_scoped_release release;
            p.peer().startStep(pointers, l);
          },
          py::arg("grads"), py::arg("loss") = py::none())
      .def(
          "start_mix",
          [](PyPeer& p, const py::object& loss) {
            Busy busy(p);
            const double l = grapevine::python::lossValue(loss);
            py::gil_scoped_release release;
            p.peer().startMix(l);
          },
          py::arg("loss") = py::none())
      .def(
          "set_lr",
          [](PyPeer& p, const py::object& lr) {
            Busy busy(p);
            p.peer().setLr(lr.is_none() ? std::numeric_limits<double>::quiet_NaN()
                                        : lr.cast<double>());
          },
          py::arg("lr"),
          "The lr of the following rounds instead of optimizer.*'s schedule (None: the schedule); "
          "with mix(): the lr your optimizer used, for the records.")
      .def(
          "scheduled_lr", [](PyPeer& p, std::int64_t round) { return p.peer().scheduledLr(round); },
          py::arg("round"), "optimizer.*'s lr for `round` (its schedule).")
      .def("wait",
           [](PyPeer& p) {
             Busy busy(p);
             py::gil_scoped_release release;
             p.peer().wait();
           })
      .def(
          "report",
          [](PyPeer& p, const py::dict& metrics) {
            std::vector<std::pair<std::string, double>> values;
            for (auto item : metrics) {
              values.emplace_back(py::str(item.first), item.second.cast<double>());
            }
            Busy busy(p);
            p.peer().report(values);
          },
          py::arg("metrics"))
      .def(
          "state",
          [](PyPeer& p) {
            std::vector<std::pair<std::string, std::vector<float>>> state;
            {
              Busy busy(p);
              state = p.peer().state();
            }
            py::dict out;
            for (const auto& [name, values] : state) {
              py::array_t<float> array(static_cast<py::ssize_t>(values.size()));
              std::copy(values.begin(), values.end(), array.mutable_data());
              out[py::str(name)] = std::move(array);
            }
            return out;
          },
          "Grapevine's state besides the tensors (momentum, public copies, replicas, error): "
          "{name: float32 array}, copies.")
      .def(
          "load_state",
          [](PyPeer& p, const py::dict& state) {
            std::vector<std::pair<std::string, std::vector<float>>> values;
            for (auto item : state) {
              const std::string name = py::str(item.first);
              py::array array = grapevine::python::checkedTensor("state '" + name + "'",
                                                                 item.second, /*writable=*/false);
              const auto* data = static_cast<const float*>(array.data());
              values.emplace_back(name, std::vector<float>(data, data + array.size()));
            }
            Busy busy(p);
            p.peer().loadState(values);
          },
          py::arg("state"), "Restores what state() returned (same names and sizes).")
      .def("poll_events",
           [](PyPeer& p) {
             Busy busy(p);
             return p.peer().pollEvents();
           })
      .def("stats",
           [](PyPeer& p) {
             Busy busy(p);
             return p.peer().stats();
           })
      .def(
          "finalize",
          [](PyPeer& p, bool average) {
            Busy busy(p);
            py::gil_scoped_release release;
            p.peer().finalize(average);
          },
          py::arg("average") = true);
}
