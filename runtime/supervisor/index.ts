/** Public surface of the process supervisor. */
export { SupervisedProcess, killAllNow, DEFAULT_STOP_GRACE_MS, type ProcessSpec, type LogRouting, type ExitInfo } from './supervised-process.js';
export { Supervisor, SupervisedChild, SYSTEM_CLOCK, type ChildSpec, type ChildRun, type SupervisorClock, type SupervisorEvent, type SupervisorOptions } from './supervisor.js';
export { RestartBackoff, backoffDelayMs, DEFAULT_RESTART_POLICY, type RestartPolicy, type RestartDecision } from './restart-policy.js';
export { MemoryLog, FileLog, PrefixedLog, type LogSink } from './log-sink.js';
export { ChildExitedError, ChildStartTimeoutError } from './errors.js';
export { RUNTIME_BIN, REPO_ROOT, runtimeCommand, jsonRecord, recordWithMsg } from './runtime-command.js';
export { watchParentLink, onParentGone, PARENT_LINK_ENV, PARENT_LINK_FD } from './parent-link.js';
export { StopSignals, DUPLICATE_SIGNAL_MS, type StopSignalAction } from './stop-signals.js';
