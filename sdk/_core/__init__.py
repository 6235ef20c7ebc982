"""The foundation every other part of `sdk` stands on: records and enums, the run
lifecycle, formats (JSON, the one converter, values), journal records, the clock,
argument checks. No I/O; imports nothing of `sdk` above it."""
