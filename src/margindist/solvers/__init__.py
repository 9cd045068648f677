"""Pure numerical routines on arrays (no estimator objects; nothing imported from ``models``)."""
