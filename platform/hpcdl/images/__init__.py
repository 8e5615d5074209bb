"""Container images: spec, compatibility rules, hpccm-based generator and the image check."""
