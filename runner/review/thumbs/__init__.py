"""Image iterations as first-class records: record, pick, iterate, export, show."""
