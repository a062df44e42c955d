"""RetinaNet (ResNeXt50-32x4d FPN) on the MLPerf OpenImages subset: data, model and evaluation."""
