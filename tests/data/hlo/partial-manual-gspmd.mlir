module @jit_partial_manual attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<1024xf32>) -> (tensor<1024xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.custom_call @Sharding(%arg0) {backend_config = "unspecified_dims=[0]", mhlo.sharding = "{devices=[4,4]<=[4,4]T(1,0) last_tile_dim_replicate}"} : (tensor<1024xf32>) -> tensor<1024xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {backend_config = "unspecified_dims=[0]", mhlo.sharding = "{devices=[1,4,4]<=[4,4]T(1,0) last_tile_dims={manual, replicated}}"} : (tensor<1024xf32>) -> tensor<256xf32>
    %2 = call @shmap_body(%1) : (tensor<256xf32>) -> tensor<256xf32>
    %3 = stablehlo.custom_call @Sharding(%2) {backend_config = "unspecified_dims=[0]", mhlo.sharding = "{devices=[1,4,4]<=[4,4]T(1,0) last_tile_dims={manual, replicated}}"} : (tensor<256xf32>) -> tensor<256xf32>
    %4 = stablehlo.custom_call @SPMDShardToFullShape(%3) {backend_config = "unspecified_dims=[0]", mhlo.sharding = "{devices=[4,4]<=[4,4]T(1,0) last_tile_dim_replicate}"} : (tensor<256xf32>) -> tensor<1024xf32>
    return %4 : tensor<1024xf32>
  }
  func.func private @shmap_body(%arg0: tensor<256xf32>) -> (tensor<256xf32> {jax.result_info = "[('tensor',)]"}) {
    %0 = "stablehlo.reduce_scatter"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %2 = stablehlo.add %arg1, %arg2 : tensor<f32>
      %3 = stablehlo.custom_call @Sharding(%2) {backend_config = "", mhlo.sharding = "{devices=[4,4]<=[4,4]T(1,0) last_tile_dims={manual, replicated}}"} : (tensor<f32>) -> tensor<f32>
      stablehlo.return %3 : tensor<f32>
    }) : (tensor<256xf32>) -> tensor<64xf32>
    %1 = "stablehlo.all_gather"(%0) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> : (tensor<64xf32>) -> tensor<256xf32>
    return %1 : tensor<256xf32>
  }
}
