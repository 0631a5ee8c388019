"""streambench stacks: bringing the brokers under test up and down (local processes, containers,
or an existing cluster)."""
