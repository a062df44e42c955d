"""What the host does to reads: its page cache (evicting a dataset for cold reads, its size against
the host's memory), its proactive reclaim, and read-limited storage on a throttled loop device."""
