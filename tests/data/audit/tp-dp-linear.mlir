module @jit_body attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tensor"}, {}]>}, %arg1: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {"tensor"}]>}, %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) -> (tensor<8x8xf32> {jax.result_info = "result[0]"}, tensor<16x8xf32> {jax.result_info = "result[1]"}, tensor<f32> {jax.result_info = "result[2]"}) {
    %0:3 = sdy.manual_computation(%arg0, %arg1, %arg2) in_shardings=[<@mesh, [{"tensor"}, {}]>, <@mesh, [{"data"}, {"tensor"}]>, <@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, [{"data"}, {}]>, <@mesh, [{"tensor"}, {}]>, <@mesh, []>] manual_axes={"data", "tensor"} (%arg3: tensor<4x8xf32>, %arg4: tensor<2x4xf32>, %arg5: tensor<2x8xf32>) {
      %1 = stablehlo.dot_general %arg4, %arg3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg6: tensor<f32>, %arg7: tensor<f32>):
        %10 = stablehlo.add %arg6, %arg7 : tensor<f32>
        stablehlo.return %10 : tensor<f32>
      }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
      %3 = stablehlo.transpose %arg4, dims = [1, 0] : (tensor<2x4xf32>) -> tensor<4x2xf32>
      %4 = stablehlo.dot_general %3, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
      %5 = "stablehlo.all_reduce"(%4) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg6: tensor<f32>, %arg7: tensor<f32>):
        %10 = stablehlo.add %arg6, %arg7 : tensor<f32>
        stablehlo.return %10 : tensor<f32>
      }) : (tensor<4x8xf32>) -> tensor<4x8xf32>
      %6 = stablehlo.subtract %arg3, %5 : tensor<4x8xf32>
      %7 = stablehlo.multiply %2, %arg5 : tensor<2x8xf32>
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %8 = stablehlo.reduce(%7 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x8xf32>, tensor<f32>) -> tensor<f32>
      %9 = "stablehlo.all_reduce"(%8) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg6: tensor<f32>, %arg7: tensor<f32>):
        %10 = stablehlo.add %arg6, %arg7 : tensor<f32>
        stablehlo.return %10 : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      sdy.return %2, %6, %9 : tensor<2x8xf32>, tensor<4x8xf32>, tensor<f32>
    } : (tensor<16x8xf32>, tensor<8x16xf32>, tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<16x8xf32>, tensor<f32>)
    return %0#0, %0#1, %0#2 : tensor<8x8xf32>, tensor<16x8xf32>, tensor<f32>
  }
}
