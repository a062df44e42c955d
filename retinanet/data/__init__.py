"""OpenImages-MLPerf data: directory layout, COCO annotations, synthetic generator and loader."""
