"""What tests and benchmarks share to drive evertune from outside: the loop's services hosted in one
process on a fresh NATS and a fresh database (`loop_stack`), and the one wait on a state nobody
announces (`waiting`). No service imports it."""
