"""``gpuscale validate``: predict published measurements and score the error."""
