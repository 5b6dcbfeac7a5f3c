"""The benchmarks' bodies and what they share: the broker they run on (:mod:`brokers`), the
workers they start and measure (:mod:`harness`), the runs they offer (:mod:`run_plans`), the
decisions they expect (:mod:`expected`), and one module per benchmark."""
