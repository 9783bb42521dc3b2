"""Config home: resolution, seeding, validated models, loading, watching, atomic writes."""
