"""The storage under test: what an emulated run reads from, started and stopped here. Read-limited storage
on a throttled loop device (and the leftovers of a killed one), a shared export read by emulated client
hosts over a limited link (sshd, the hosts, the loopback limit), an S3 endpoint, the latency relays in
front of the last two, and the probes that measure a storage (round trips, sequential rates)."""
