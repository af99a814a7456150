module @jit_body attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=16]> {stablehlo.mesh = {axes = [{name = "data", size = 16 : i64}]}}
  func.func public @main(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg2: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg3: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) -> (tensor<16x16xf32> {jax.result_info = "result[0]"}, tensor<16x16xf32> {jax.result_info = "result[1]"}, tensor<f32> {jax.result_info = "result[2]"}) {
    %0:3 = sdy.manual_computation(%arg0, %arg1, %arg2, %arg3) in_shardings=[<@mesh, [{"data"}, {}]>, <@mesh, [{"data"}, {}]>, <@mesh, [{"data"}, {}]>, <@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, [{"data"}, {}]>, <@mesh, [{"data"}, {}]>, <@mesh, []>] manual_axes={"data"} (%arg4: tensor<1x16xf32>, %arg5: tensor<1x16xf32>, %arg6: tensor<2x16xf32>, %arg7: tensor<2x16xf32>) {
      %1 = "stablehlo.all_gather"(%arg4) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> : (tensor<1x16xf32>) -> tensor<16x16xf32>
      %2 = "stablehlo.all_gather"(%arg5) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> : (tensor<1x16xf32>) -> tensor<16x16xf32>
      %3 = stablehlo.dot_general %arg6, %1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
      %4 = func.call @relu(%3) : (tensor<2x16xf32>) -> tensor<2x16xf32>
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x16xf32>
      %6 = stablehlo.compare GT, %3, %5, FLOAT : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xi1>
      %7 = stablehlo.dot_general %4, %2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
      %8 = stablehlo.multiply %7, %arg7 : tensor<2x16xf32>
      %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %9 = stablehlo.reduce(%8 init: %cst_0) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x16xf32>, tensor<f32>) -> tensor<f32>
      %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %10 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<2x16xf32>
      %11 = stablehlo.multiply %10, %arg7 : tensor<2x16xf32>
      %12 = stablehlo.dot_general %11, %4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<16x16xf32>
      %13 = stablehlo.transpose %12, dims = [1, 0] : (tensor<16x16xf32>) -> tensor<16x16xf32>
      %14 = stablehlo.dot_general %11, %2, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
      %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %15 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<2x16xf32>
      %16 = stablehlo.select %6, %14, %15 : tensor<2x16xi1>, tensor<2x16xf32>
      %17 = stablehlo.dot_general %16, %arg6, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<16x16xf32>
      %18 = stablehlo.transpose %17, dims = [1, 0] : (tensor<16x16xf32>) -> tensor<16x16xf32>
      %19 = "stablehlo.reduce_scatter"(%18) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
      ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
        %24 = stablehlo.add %arg8, %arg9 : tensor<f32>
        stablehlo.return %24 : tensor<f32>
      }) : (tensor<16x16xf32>) -> tensor<1x16xf32>
      %20 = "stablehlo.reduce_scatter"(%13) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
      ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
        %24 = stablehlo.add %arg8, %arg9 : tensor<f32>
        stablehlo.return %24 : tensor<f32>
      }) : (tensor<16x16xf32>) -> tensor<1x16xf32>
      %21 = stablehlo.subtract %arg4, %19 : tensor<1x16xf32>
      %22 = stablehlo.subtract %arg5, %20 : tensor<1x16xf32>
      %23 = "stablehlo.all_reduce"(%9) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
        %24 = stablehlo.add %arg8, %arg9 : tensor<f32>
        stablehlo.return %24 : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      sdy.return %21, %22, %23 : tensor<1x16xf32>, tensor<1x16xf32>, tensor<f32>
    } : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>)
    return %0#0, %0#1, %0#2 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>
  }
  func.func private @relu(%arg0: tensor<2x16xf32>) -> tensor<2x16xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x16xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<2x16xf32>
    return %1 : tensor<2x16xf32>
  }
}
