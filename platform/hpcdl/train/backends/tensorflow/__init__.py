"""TensorFlow: Keras layers under tf.distribute.MultiWorkerMirroredStrategy (trainer), and the
shared update rule as TensorFlow ops compiled into the step (update)."""
