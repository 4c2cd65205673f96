// What every signal does in this process (its sigaction), saved and put back as it was.
//
// Some libraries change signal handlers when they are loaded: libfabric's PSM provider pulls in
// libinfinipath, whose constructor takes SIGINT, SIGTERM, SIGABRT and the fatal signals (a Python
// program then no longer gets KeyboardInterrupt, and a `grapevine` command no longer stops
// cleanly). Loading such a library inside a SavedSignalDispositions scope undoes that:
//
//   { SavedSignalDispositions keep;  handle = dlopen(...); }   // handlers as before
//
// Contracts: saves signals 1..SIGRTMAX (except SIGKILL/SIGSTOP, which cannot be caught) at
// construction and reinstalls each one whose disposition changed at destruction. Not thread-safe
// against another thread changing handlers meanwhile (nobody should).
#pragma once

#include <csignal>
#include <vector>

namespace grapevine {

class SavedSignalDispositions {
 public:
  SavedSignalDispositions();
  ~SavedSignalDispositions();
  SavedSignalDispositions(const SavedSignalDispositions&) = delete;
  SavedSignalDispositions& operator=(const SavedSignalDispositions&) = delete;

  // Puts back every disposition that changed since construction and returns how many (the
  // destructor calls it; a second call does nothing).
  int restore();

 private:
  struct Saved {
    int signal;
    struct sigaction action;
  };
  std::vector<Saved> saved_;
  bool restored_ = false;
};

}  // namespace grapevine
