"""What the host does to reads: its page cache (evicting a dataset for cold reads, its size against
the host's memory), its proactive reclaim, read-limited storage on a throttled loop device, and a file
system's sequential write and read rates (sequential_rates)."""
