"""RetinaNet model: flavors, backbone with FPN, detector with losses and postprocessing."""
