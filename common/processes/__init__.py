"""Processes this project starts and must not leave behind: who a pid is (its start time), a command
run in a session of its own and ended as a whole, and a guard that ends it, or removes a folder, when
the process that started it dies, even by SIGKILL."""
