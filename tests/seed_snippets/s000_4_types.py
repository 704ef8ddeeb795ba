from diffract import ParameterType

with session:
    # Filter by dense layers
    session.filter(param_types=[ParameterType.DENSE]).compute.apply("frob_norm")
    
    # Create a custom type from a string
    custom_type = ParameterType.from_string("attention")
    session.filter(param_types=[custom_type]).compute.apply("frob_norm")
