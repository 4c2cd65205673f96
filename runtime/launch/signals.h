// The launcher's stop signal. SIGINT/SIGTERM set one process-wide flag; the supervisor's watch loop
// reads it (Supervisor::watch forwards it to every peer's group, stops restarting and executing
// faults), and the command's exit code says the run was stopped.
#pragma once

namespace grapevine::launch {

// Installs the handler that records SIGINT and SIGTERM (no SA_RESTART, no other flag), ignores
// SIGPIPE (a write to a guardian that is gone must not kill us) and, when `ignoreUsr1`, SIGUSR1:
// the supervisor's "every other peer has exited" signal must not end a peer that has not installed
// its handler yet, so it is ignored from the fork on (inherited, and kept across exec; `grapevine
// peer` installs its own). Main thread, once, before the first peer starts.
void installSignalHandlers(bool ignoreUsr1);

// The last SIGINT/SIGTERM received since installSignalHandlers (its number), or 0 when none. Any
// thread; never blocks.
int stopSignal();

}  // namespace grapevine::launch
