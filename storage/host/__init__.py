"""The client host: what it does to reads (its page cache, evicting a dataset for cold reads, its size
against the host's memory; its proactive reclaim), the run's client memory (a cgroup and its keeper),
the cgroup files both use, and each host's series (CPU, memory, reads) while a run trains. The storage
a run reads from is storage.backends."""
