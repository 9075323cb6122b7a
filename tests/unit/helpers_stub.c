/* keeps test_helpers non-empty when tests/unit/helpers/ has no files */
