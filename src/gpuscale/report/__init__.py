"""Reports for people: self-contained HTML pages with interactive plots."""
